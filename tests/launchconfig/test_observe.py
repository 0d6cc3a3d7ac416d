"""End to end on the simulator: unit files with drop-ins → snapshots → the observed change-log entry."""

import pytest

from dashboard.models import ConfigSnapshot, KVPoolEntry

pytestmark = [pytest.mark.django_db(transaction=True)]

WINDOW = "[Service]\nExecStart=\nExecStart=/opt/vllm/bin/vllm serve Qwen/Qwen3-8B --host 127.0.0.1 --port {port} --max-model-len {n} --gpu-memory-utilization 0.9 --enable-prefix-caching $VLLM_EXTRA_ARGS\n"


def tick(engines):
    from sparkops.poller.resident import ResidentPoller

    engine = next(iter(engines.values()))
    poller = ResidentPoller(engine.host.name, duties={}, flush_interval=0)
    result = poller.metrics_tick(engines=list(engines.values()))
    poller.launch_tick()  # the launch duty, on its own thread in a worker
    if poller.accounts_wanted:  # an account read before the restart: the next poll reads it again
        result = poller.metrics_tick(engines=list(engines.values()))
        poller.launch_tick()
    return result, poller


def test_snapshot_records_unit_files_environment_flags_and_account(box_engines, sim_box):
    from sparkops.collectors.unitconfig import read_units
    from sparkops.launch.observer import Observer

    made = Observer().observe(list(box_engines.values()))
    assert {s.engine.name for s in made} == {"nemotron", "lla"}
    snap = ConfigSnapshot.objects.get(engine=box_engines["nemotron"])
    d = snap.data
    unit = d["unit"]
    assert unit["fragment_path"] == "/etc/systemd/system/nemotron.service"
    assert unit["drop_in_paths"] == [
        "/etc/systemd/system/nemotron.service.d/10-extra-args.conf",
        "/etc/systemd/system/nemotron.service.d/20-seqs.conf",
    ]
    flags = d["flags"]["flags"]
    assert flags["--max-model-len"] == "131072" and flags["--enable-prefix-caching"] is True
    # The later drop-in wins, and the flag is credited to it.
    assert flags["--max-num-seqs"] == "128"
    assert d["flags"]["origins"]["--max-num-seqs"] == "/etc/systemd/system/nemotron.service.d/20-seqs.conf"
    assert d["flags"]["origins"]["--max-model-len"] == "/etc/systemd/system/nemotron.service"
    assert d["environment"]["MAX_JOBS"] == "4" and d["environment"]["CUDA_HOME"] == "/usr/local/cuda"
    assert unit["restart"] == "on-failure" and unit["start_limit_burst"] == 5 and unit["timeout_start_usec"] == "5min"
    assert unit["memory_max"] == str(112 << 30) and unit["user"] == "llm"
    assert unit["exec_start_post"][0]["argv"][0] == "/usr/local/bin/sparkops-wait-ready"
    assert unit["edge_states"]["network-online.target"]["UnitFileState"] == "static"
    assert d["account"]["max_model_len"] == 131072 and d["account"]["cache_config"]["num_gpu_blocks"]
    assert d["account"]["version"]
    lla = ConfigSnapshot.objects.get(engine=box_engines["lla"]).data
    # llama-server's context comes from LLAMA_ARG_CTX_SIZE in its EnvironmentFile.
    assert lla["flags"]["flags"]["--ctx-size"] == str(32768 * 4) and lla["flags"]["flags"]["--parallel"] == "4"
    assert lla["flags"]["origins"]["--ctx-size"] == "/etc/default/lla"
    assert lla["flags"]["via_env"]["--ctx-size"] == "LLAMA_ARG_CTX_SIZE"
    assert lla["account"]["n_ctx"] == 32768
    assert lla["unit"]["edge_states"]["demo-vision.service"]["UnitFileState"] == "disabled"
    # Nothing changed: no new snapshot.
    assert Observer().observe(list(box_engines.values())) == []
    assert ConfigSnapshot.objects.count() == 2
    assert read_units([box_engines["nemotron"]])[box_engines["nemotron"].pk]["files_read"][-1].endswith("20-seqs.conf")


def test_a_window_raise_writes_the_observed_entry_with_the_file_and_ledger_row(box_engines, sim_box, client, viewer):
    from sparkops.changelog.models import Entry

    engines = {"nemotron": box_engines["nemotron"]}
    tick(engines)
    first = ConfigSnapshot.objects.get(engine=box_engines["nemotron"])
    port = sim_box.url("nemotron").rsplit(":", 1)[1]
    sim_box.dropin("nemotron", "20-window.conf", WINDOW.format(port=port, n=262144))
    sim_box.restart("nemotron")
    sim_box.wait_ready("nemotron")
    result, poller = tick(engines)
    snaps = list(ConfigSnapshot.objects.filter(engine=box_engines["nemotron"]).order_by("id"))
    assert len(snaps) == 2 and snaps[1].previous_id == first.pk
    assert snaps[1].data["flags"]["flags"]["--max-model-len"] == "262144"
    assert snaps[1].data["account"]["max_model_len"] == 262144
    entry = Entry.objects.get(pk=snaps[1].logged_entry_id)
    assert entry.kind == "flag_change" and entry.author_id is None and entry.author_name == "SparkOps"
    assert list(entry.engines.all()) == [box_engines["nemotron"]]
    assert [(f.flag, f.old, f.new) for f in entry.flags.all()] == [("--max-model-len", "131072", "262144")]
    assert (
        "`--max-model-len`: 131072 → 262144 (set in /etc/systemd/system/nemotron.service.d/20-window.conf)"
        in entry.body_md
    )
    row = KVPoolEntry.objects.filter(engine=box_engines["nemotron"]).order_by("-recorded_at").first()
    assert row.window == 262144 and row.pool_tokens < 766464  # the raise cost the pool a little
    assert [e.url for e in entry.evidence.all()] == [f"/changelog/ledgers/#kv-{row.pk}"]
    client.force_login(viewer)
    assert f'id="kv-{row.pk}"' in client.get("/changelog/ledgers/").content.decode()  # the link lands on the row
    # The next tick (within the minute, nothing moved) observes nothing: a time check only.
    assert poller.launch.tick(engines=list(engines.values()), units=result.host["units"]) == []


def test_a_later_drop_in_still_at_the_old_value_is_config_drift_naming_it(box_engines, sim_box):
    from datetime import timedelta

    from django.utils import timezone

    from sparkops.alerts.models import AlertEvent
    from sparkops.changelog.grammar import FlagLine
    from sparkops.changelog.services import entry_create

    nemotron = box_engines["nemotron"]
    engines = {"nemotron": nemotron}
    tick(engines)
    entry_create(
        author_name="alice",
        effective_at=timezone.now() - timedelta(minutes=1),
        kind="flag_change",
        title="Raise --max-model-len 131072 → 262144 on nemotron",
        engines=[nemotron],
        flags=[FlagLine("--max-model-len", "131072", "262,144")],
    )
    port = sim_box.url("nemotron").rsplit(":", 1)[1]
    sim_box.dropin("nemotron", "20-window.conf", WINDOW.format(port=port, n=262144))
    sim_box.dropin("nemotron", "30-old.conf", WINDOW.format(port=port, n=131072))  # sorted after: it wins
    sim_box.restart("nemotron")
    sim_box.wait_ready("nemotron")
    tick(engines)
    event = AlertEvent.objects.get(rule="config_drift")
    assert event.state == "firing" and event.engine_id == nemotron.pk
    assert "--max-model-len: the change log says 262,144" in event.message and "runs 131072" in event.message
    assert "/etc/systemd/system/nemotron.service.d/30-old.conf" in event.message
    # The drop-in is fixed, the engine restarts: the drift resolves and the observed entry appears.
    sim_box.dropin("nemotron", "30-old.conf", None)
    sim_box.restart("nemotron")
    sim_box.wait_ready("nemotron")
    tick(engines)
    event.refresh_from_db()
    assert event.state == "resolved"
    latest = ConfigSnapshot.objects.filter(engine=nemotron).order_by("-id").first()
    assert latest.data["flags"]["flags"]["--max-model-len"] == "262144" and latest.logged_entry_id


def test_starts_are_measured_cold_with_compilers_then_warm(tmp_path, settings, monkeypatch, db, client, viewer):
    from django.conf import settings as django_settings

    from dashboard.models import Engine, EngineStart, Host
    from simulator.client import Simulation
    from sparkops.alerts.models import AlertEvent
    from sparkops.poller.resident import ResidentPoller

    with Simulation(
        engines=["vllm:cold,cold_seconds=7,warm_cache=1"], state_dir=tmp_path / "sim", ready_timeout=30
    ) as sim:
        monkeypatch.setenv("SPARKOPS_SIM_STATE_DIR", str(sim.state_dir))
        for key, value in {
            "SPARKOPS_SYSTEMCTL": "sim-systemctl",
            "SPARKOPS_JOURNALCTL": "sim-journalctl",
            "SPARKOPS_NVIDIA_SMI": "sim-nvidia-smi",
        }.items():
            setattr(settings, key, str(sim.bin_dir / value))
        settings.SPARKOPS_GPU_BACKEND, settings.SPARKOPS_PROC_ROOT = "nvidia-smi", str(sim.state_dir / "proc")
        settings.SPARKOPS_HOST_ROOT = str(sim.root)
        host = Host.objects.create(name=django_settings.SPARKOPS_HOST_NAME)
        engine = Engine.objects.create(name="cold", kind="vllm", url=sim.url("cold"), host=host, unit=sim.unit("cold"))
        poller = ResidentPoller(host.name, duties={}, flush_interval=0)

        def tick_until(predicate, timeout=30):
            deadline = __import__("time").monotonic() + timeout
            while not predicate():
                assert __import__("time").monotonic() < deadline
                poller.metrics_tick()  # its own engines, as the worker's poller ticks
                poller.launch_tick()  # and its launch duty follows the starts
                __import__("time").sleep(0.5)

        # Its first boot found the JIT cache warm (warm_cache); the cache is emptied and it restarts with this poller
        # watching: MAX_JOBS=4 compilers in its unit for 7 s.
        sim.cold("cold")
        poller.metrics_tick()
        poller.launch_tick()
        # its first boot, begun before this poller: recorded too, timed by systemd's clock (issue 47)
        tick_until(lambda: EngineStart.objects.filter(engine=engine).exists())
        boot = EngineStart.objects.get(engine=engine)
        sim.restart("cold")
        tick_until(lambda: EngineStart.objects.filter(engine=engine).count() == 2)
        start = EngineStart.objects.exclude(pk=boot.pk).get(engine=engine)
        assert start.kind == "cold" and start.compilers_max == 4 and start.duration_s >= 6
        assert start.budget_s == 60 and start.timeout_s == 300
        sim.restart("cold")
        tick_until(lambda: EngineStart.objects.filter(engine=engine).count() == 3)
        warm = EngineStart.objects.filter(engine=engine).order_by("-started_at").first()
        assert warm.kind == "warm" and warm.compilers_max == 0 and warm.duration_s < start.duration_s
        assert not AlertEvent.objects.filter(rule="start_over_budget", state="firing").exists()
        client.force_login(viewer)
        page = client.get("/engines/cold/").content.decode()
        assert 'data-kind="cold"' in page and 'data-kind="warm"' in page and "Readiness budget 60 s" in page


def test_a_hand_run_engine_outside_any_unit_is_watched_audited_and_retired_when_gone(
    tmp_path, settings, monkeypatch, db
):
    from django.conf import settings as django_settings

    from dashboard.models import Engine, Host
    from simulator.client import Simulation
    from sparkops.audit.run import audit
    from sparkops.launch.observer import Observer

    with Simulation(engines=["vllm:nemotron", "vllm:smoke,hand_run=1"], state_dir=tmp_path / "sim") as sim:
        monkeypatch.setenv("SPARKOPS_SIM_STATE_DIR", str(sim.state_dir))
        settings.SPARKOPS_SYSTEMCTL = str(sim.bin_dir / "sim-systemctl")
        settings.SPARKOPS_PROC_ROOT, settings.SPARKOPS_HOST_ROOT = str(sim.state_dir / "proc"), str(sim.root)
        assert sim.unit("smoke") == ""  # systemd knows nothing of it
        host = Host.objects.create(name=django_settings.SPARKOPS_HOST_NAME)
        nemotron = Engine.objects.create(
            name="nemotron", kind="vllm", url=sim.url("nemotron"), host=host, unit=sim.unit("nemotron"), status="up"
        )
        Observer().observe([nemotron], host=host)
        port = sim.url("smoke").rsplit(":", 1)[1]
        smoke = Engine.objects.get(name=f"hand-run-{port}")
        assert smoke.kind == "vllm" and smoke.url == sim.url("smoke") and smoke.unit == "" and smoke.retired_at is None
        snap = smoke.config_snapshots.get()
        assert snap.data["launch"] == "hand-run" and snap.data["unit"] is None
        assert snap.data["flags"]["flags"]["--gpu-memory-utilization"] == "0.15"
        assert snap.data["flags"]["origins"]["--gpu-memory-utilization"].endswith("/cmdline")
        assert (
            snap.data["environment"]["VIRTUAL_ENV"] == "/home/op/venv-smoke"
            and "MAX_JOBS" not in snap.data["environment"]
        )
        assert snap.data["observed"]["process"]["cgroup"].endswith("session-3.scope")
        results = audit([nemotron, smoke], only_engine=smoke)
        (caps,) = [r for r in results if r.check == "compile_caps"]
        assert caps.status == "fail" and "in the environment of a hand-run engine" in caps.evidence
        (shares,) = [r for r in results if r.check == "memory_share_sum"]
        assert "smoke" not in shares.evidence and f"hand-run-{port} 0.15" in shares.evidence
        sim.stop_unit("smoke")
        Observer().observe([nemotron], host=host)
        smoke.refresh_from_db()
        assert smoke.retired_at is not None  # its process is gone; its history stays


def test_a_hung_systemctl_cat_never_delays_the_metrics_poll(box_engines, sim_box, settings, tmp_path):
    """The launch observation is a duty with a thread of its own: while its `systemctl cat`
    hangs, the metrics ticks go on (each reads the units with `systemctl show`), and the
    observation is made once `cat` answers."""
    from sparkops.poller.resident import ResidentPoller
    from tests.waiting import wait_for

    entered, release = tmp_path / "cat-entered", tmp_path / "cat-release"
    wrapper = tmp_path / "systemctl"
    wrapper.write_text(
        "#!/bin/sh\n"  # `systemctl cat` waits (at most 60 s) for the test to let it answer
        f'case " $* " in *" cat "*) touch {entered}; i=0; '
        f"while [ ! -e {release} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done;; esac\n"
        f'exec {settings.SPARKOPS_SYSTEMCTL} "$@"\n'
    )
    wrapper.chmod(0o755)
    settings.SPARKOPS_SYSTEMCTL = str(wrapper)
    poller = ResidentPoller(box_engines["nemotron"].host.name, poll_interval=0.5, liveness_interval=0.25, duties={})
    poller.start()
    try:
        assert wait_for(entered.exists, timeout=30)
        ticks = poller.cycles["metrics"]
        assert wait_for(lambda: poller.cycles["metrics"] >= ticks + 3, timeout=20), poller.cycles
        assert not ConfigSnapshot.objects.exists()  # the observation still waits for `cat`
        release.touch()
        assert wait_for(lambda: ConfigSnapshot.objects.filter(engine=box_engines["nemotron"]).exists(), timeout=30)
    finally:
        release.touch()
        poller.stop()
    assert poller.cycles["failed"] == 0
