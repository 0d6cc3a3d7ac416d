"""The launch configuration page (`/engines/NAME/launch/`), from snapshots the real observer took of the
simulated box's units (`systemctl show`/`cat` of sim-systemctl, drop-ins on disk): every flag with
the file that set it, the unit's files in order, the environment with secrets redacted, the readiness
helper, and each version's difference; a hand-run engine; an engine with no snapshot; bad input."""

import pytest

from dashboard.models import ConfigSnapshot

pytestmark = [pytest.mark.django_db(transaction=True)]

HF_TOKEN = "hf_live_0123456789abcdefSECRET"
API_KEY = "sk-proj-launchpage-secret-42"
SECRETS_DROPIN = (
    f'[Service]\nEnvironment=HF_TOKEN={HF_TOKEN} CUDA_DEVICE_ORDER=PCI_BUS_ID\nEnvironment="OPENAI_API_KEY={API_KEY}"\n'
)
SEQS_64 = '[Service]\nEnvironment="VLLM_EXTRA_ARGS=--max-num-seqs 64"\n'
DROP = "/etc/systemd/system/nemotron.service.d/"


def observe(engines):
    from sparkops.launch.observer import Observer

    return Observer().observe(list(engines))


def page(client, name, **query):
    return client.get(f"/engines/{name}/launch/", query)


def test_flags_with_their_files_unit_files_in_order_environment_redacted_and_readiness(
    box_engines, sim_box, viewer_client
):
    nemotron = box_engines["nemotron"]
    sim_box.dropin("nemotron", "30-secrets.conf", SECRETS_DROPIN)
    sim_box.restart("nemotron")
    sim_box.wait_ready("nemotron")
    observe([nemotron])
    resp = page(viewer_client, "nemotron")
    assert resp.status_code == 200
    html = resp.content.decode()
    ctx = resp.context
    flags = {r["flag"]: r for r in ctx["flags"]}
    # The later drop-in's VLLM_EXTRA_ARGS wins, and the flag is credited to it, by name and rank.
    assert flags["--max-num-seqs"]["value"] == "128"
    assert flags["--max-num-seqs"]["origin"] == DROP + "20-seqs.conf"
    assert flags["--max-num-seqs"]["label"] == "drop-in 2 of 3"
    assert flags["--max-model-len"]["label"] == "unit file"
    assert flags["--max-model-len"]["account"][0] == "131072" and flags["--max-model-len"]["agrees"] is True
    # Flags are listed in the order of the files that set them: the fragment's before the drop-in's.
    order = [r["flag"] for r in ctx["flags"]]
    assert order.index("--max-model-len") < order.index("--max-num-seqs")
    assert '<tr data-flag="--max-num-seqs">' in html and "20-seqs.conf" in html
    # The unit's files, each with its text, in the order systemd applies them.
    files = ctx["files"]
    assert [f["path"] for f in files] == [
        "/etc/systemd/system/nemotron.service",
        DROP + "10-extra-args.conf",
        DROP + "20-seqs.conf",
        DROP + "30-secrets.conf",
    ]
    assert "later in lexical order: this one wins" in files[2]["text"]
    assert "HF_TOKEN=redacted CUDA_DEVICE_ORDER=PCI_BUS_ID" in files[3]["text"]
    assert '"OPENAI_API_KEY=redacted"' in files[3]["text"]
    # The environment: secrets named and redacted, the file that set each.
    env = {r["name"]: r for r in ctx["environment"]}
    assert env["HF_TOKEN"]["secret"] and env["HF_TOKEN"]["value"] == "redacted"
    assert env["HF_TOKEN"]["origin"] == DROP + "30-secrets.conf"
    assert env["CUDA_DEVICE_ORDER"]["value"] == "PCI_BUS_ID"
    assert HF_TOKEN not in html and API_KEY not in html
    assert HF_TOKEN[-12:] not in html  # no piece of it either
    stored = ConfigSnapshot.objects.get(engine=nemotron).data
    assert HF_TOKEN not in str(stored) and API_KEY not in str(stored)  # nor in what is stored
    # The readiness helper and its budget against TimeoutStartSec.
    ready = ctx["readiness"]
    assert ready["helpers"][0]["argv"].startswith("/usr/local/bin/sparkops-wait-ready")
    assert ready["timeout_s"] == 300 and ready["budget_s"] is not None
    assert ready["margin_s"] == 300 - ready["budget_s"]
    assert 'id="readiness"' in html and "sparkops-wait-ready" in html
    assert {d["directive"] for d in ctx["directives"]} >= {"Restart=", "TimeoutStartUSec=", "MemoryMax="}
    assert len(ctx["history"]) == 1 and ctx["history"][0]["first"]


def test_each_version_shows_its_difference_and_an_older_one_can_be_read(box_engines, sim_box, viewer_client):
    from sparkops.changelog.models import Entry

    nemotron = box_engines["nemotron"]
    observe([nemotron])
    first = ConfigSnapshot.objects.get(engine=nemotron)
    sim_box.dropin("nemotron", "20-seqs.conf", SEQS_64)
    sim_box.restart("nemotron")
    sim_box.wait_ready("nemotron")
    observe([nemotron])
    second = ConfigSnapshot.objects.filter(engine=nemotron).latest("id")
    assert second.pk != first.pk
    resp = page(viewer_client, "nemotron")
    history = resp.context["history"]
    assert [v["snapshot"].pk for v in history] == [second.pk, first.pk]
    assert ("--max-num-seqs", "128", "64", DROP + "20-seqs.conf") in history[0]["lines"]
    html = resp.content.decode()
    entry = Entry.objects.get(pk=second.logged_entry_id)  # the same lines the change log was written from
    assert f'href="/changelog/{entry.pk}/"' in html
    assert (
        '<del class="mono"><span class="nb">128</span></del> → <ins class="mono"><span class="nb">64</span></ins>'
        in html
    )
    # The older version, by its number: its own flags, marked as older.
    old = page(viewer_client, "nemotron", version=first.pk)
    assert old.status_code == 200 and old.context["snapshot"].pk == first.pk
    assert {r["flag"]: r["value"] for r in old.context["flags"]}["--max-num-seqs"] == "128"
    assert "an older version" in old.content.decode()


def test_a_hand_run_engine_shows_its_process_not_a_unit(tmp_path, settings, monkeypatch, viewer_client):
    from django.conf import settings as django_settings

    from dashboard.models import Engine, Host
    from simulator.client import Simulation

    with Simulation(engines=["vllm:nemotron", "vllm:smoke,hand_run=1"], state_dir=tmp_path / "sim") as sim:
        monkeypatch.setenv("SPARKOPS_SIM_STATE_DIR", str(sim.state_dir))
        settings.SPARKOPS_SYSTEMCTL = str(sim.bin_dir / "sim-systemctl")
        settings.SPARKOPS_PROC_ROOT, settings.SPARKOPS_HOST_ROOT = str(sim.state_dir / "proc"), str(sim.root)
        host = Host.objects.create(name=django_settings.SPARKOPS_HOST_NAME)
        nemotron = Engine.objects.create(
            name="nemotron", kind="vllm", url=sim.url("nemotron"), host=host, unit=sim.unit("nemotron"), status="up"
        )
        from sparkops.launch.observer import Observer

        Observer().observe([nemotron], host=host)
        smoke = Engine.objects.get(name=f"hand-run-{sim.url('smoke').rsplit(':', 1)[1]}")
        pid = smoke.config_snapshots.get().data["observed"]["process"]["pid"]
        resp = page(viewer_client, smoke.name)
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "by hand, outside any unit" in html and f'pid <span class="mono">{pid}</span>' in html
    flags = {r["flag"]: r for r in resp.context["flags"]}
    assert flags["--gpu-memory-utilization"]["value"] == "0.15"
    assert flags["--gpu-memory-utilization"]["origin"] == f"/proc/{pid}/cmdline"
    assert flags["--gpu-memory-utilization"]["label"] == "the process (hand-run)"
    env = {r["name"]: r for r in resp.context["environment"]}
    assert (
        env["VIRTUAL_ENV"]["value"] == "/home/op/venv-smoke" and env["VIRTUAL_ENV"]["origin"] == f"/proc/{pid}/environ"
    )
    # No unit: no unit files, no unit settings, no readiness helper to hold to a budget.
    assert 'id="unit-files"' not in html and 'id="readiness"' not in html and 'id="unit-settings"' not in html
    assert "No unit: SparkOps measures the starts of an engine's systemd unit" in html.replace("&#x27;", "'")


def test_an_engine_without_a_snapshot_says_why(fleet, viewer_client):
    from dashboard.models import Engine

    resp = page(viewer_client, "vllm-main")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "No configuration snapshot of vllm-main yet." in html
    assert "vllm-main.service" in html and "about once a minute" in html
    assert 'id="flags"' not in html and 'id="history"' in html and "None yet." in html
    Engine.objects.create(name="added", kind="openai", url="http://127.0.0.1:9", host=fleet["host"])
    html = page(viewer_client, "added").content.decode()
    assert "No configuration snapshot of added yet." in html and "It has no systemd unit" in html


def test_a_bad_version_is_refused_with_a_clear_message_showing_the_newest(fleet, viewer_client):
    from django.utils.html import escape

    from sparkops.launch.snapshot import observe_engine

    snap = observe_engine(fleet["vllm"], None, account={})
    other = observe_engine(fleet["llama"], None, account={})
    for query, status, says in (
        ({"version": "abc"}, 400, "Version 'abc' is not a snapshot number: showing the newest."),
        ({"version": str(other.pk)}, 404, f"vllm-main has no configuration snapshot {other.pk}: showing the newest."),
    ):
        resp = page(viewer_client, "vllm-main", **query)
        assert resp.status_code == status
        assert escape(says) in resp.content.decode() and resp.context["snapshot"].pk == snap.pk
    assert viewer_client.get("/engines/no-such-engine/launch/").status_code == 404
    assert ConfigSnapshot.objects.count() == 2  # reading changed nothing


def test_the_card_engine_page_and_audit_findings_link_it(fleet, viewer_client):
    from sparkops.launch.snapshot import observe_engine

    observe_engine(fleet["vllm"], {"unit": "vllm-main.service", "restart": "on-failure"}, account={})
    link = 'href="/engines/vllm-main/launch/"'
    assert link in viewer_client.get("/").content.decode()  # the overview's engine card
    assert link in viewer_client.get("/engines/vllm-main/").content.decode()
    audit_page = viewer_client.get("/hosts/spark-1/audit/").content.decode()
    assert f'<a {link} class="launch-link" title="launch configuration">vllm-main</a>' in audit_page


def test_unit_text_redaction():
    from sparkops.launch.snapshot import redact_unit_text

    text = (
        "[Service]\n"
        "Environment=HF_TOKEN=hf_abc CUDA_HOME=/usr/local/cuda\n"
        'Environment="OPENAI_API_KEY=sk one two" "MAX_JOBS=4"\n'
        "ExecStart=/opt/vllm serve m --api-key sk-literal --port 1 --hf-token=hf_zz\n"
        "ExecStartPost=/x $HF_TOKEN leakedvalue\n"
    )
    assert redact_unit_text(text, {"leakedvalue", "1"}) == (
        "[Service]\n"
        "Environment=HF_TOKEN=redacted CUDA_HOME=/usr/local/cuda\n"
        'Environment="OPENAI_API_KEY=redacted" "MAX_JOBS=4"\n'
        "ExecStart=/opt/vllm serve m --api-key redacted --port 1 --hf-token=redacted\n"
        "ExecStartPost=/x $HF_TOKEN redacted\n"
    )


def test_the_starts_table_shows_each_measured_start_and_the_budget(fleet, viewer_client):
    from datetime import timedelta

    from django.utils import timezone

    from dashboard.models import EngineStart

    at = timezone.now() - timedelta(hours=2)
    for minutes, kind, seconds in ((0, "cold", 412.0), (30, "warm", 61.5), (60, "warm", 58.0)):
        started = at + timedelta(minutes=minutes)
        EngineStart.objects.create(
            engine=fleet["vllm"],
            started_at=started,
            active_at=started + timedelta(seconds=seconds - 1),
            healthy_at=started + timedelta(seconds=seconds),
            kind=kind,
            compilers_max=21 if kind == "cold" else 0,
            budget_s=1080,
            timeout_s=1200,
        )
    resp = page(viewer_client, "vllm-main")
    html = resp.content.decode()
    assert [row["start"].kind for row in resp.context["starts"]] == ["warm", "warm", "cold"]  # newest first
    assert resp.context["starts"][2]["active_s"] == 411.0
    assert '<tr data-kind="cold"><td>cold</td><td>1</td><td>412 s</td>' in html  # the restart budget's classes
    assert "412.0 s" in html and "61.5 s" in html and "1080 s" in html and "1200 s" in html


def test_a_key_in_an_overridden_exec_start_is_not_shown(box_engines, sim_box, viewer_client):
    """A drop-in's ExecStart= with a literal --api-key, replaced by a later drop-in's: the overridden
    line is listed, its key redacted, and the key is nowhere on the page."""
    nemotron = box_engines["nemotron"]
    port = sim_box.url("nemotron").rsplit(":", 1)[1]
    serve = f"/opt/vllm/bin/vllm serve Qwen/Qwen3-8B --host 127.0.0.1 --port {port} --max-model-len 131072"
    sim_box.dropin("nemotron", "40-key.conf", f"[Service]\nExecStart=\nExecStart={serve} --api-key {API_KEY}\n")
    sim_box.dropin("nemotron", "50-nokey.conf", f"[Service]\nExecStart=\nExecStart={serve}\n")
    sim_box.restart("nemotron")
    sim_box.wait_ready("nemotron")
    observe([nemotron])
    resp = page(viewer_client, "nemotron")
    html = resp.content.decode()
    shadowed = {s["file"]: s["argv"] for s in resp.context["shadowed"]}
    assert shadowed[DROP + "40-key.conf"].endswith("--api-key redacted")
    assert "--api-key redacted" in resp.context["files"][-2]["text"]
    assert API_KEY not in html
    assert API_KEY not in str(ConfigSnapshot.objects.filter(engine=nemotron).latest("id").data)  # nor stored


def test_the_page_costs_the_same_queries_for_three_versions_or_thirty(
    fleet, viewer_client, django_assert_max_num_queries
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from sparkops.launch.snapshot import observe_engine

    def versions(n):
        for i in range(n):
            observe_engine(fleet["vllm"], {"unit": "vllm-main.service", "restart": f"on-failure-{i}"}, account={})

    versions(3)
    with CaptureQueriesContext(connection) as few:
        assert page(viewer_client, "vllm-main").status_code == 200
    versions(27)
    with django_assert_max_num_queries(len(few)):
        resp = page(viewer_client, "vllm-main")
    assert len(resp.context["history"]) == 30


def test_a_snapshot_from_before_the_files_text_was_kept_gets_it_at_the_next_observation(
    box_engines, sim_box, viewer_client
):
    nemotron = box_engines["nemotron"]
    observe(box_engines.values())
    snap = ConfigSnapshot.objects.get(engine=nemotron)
    snap.data = {**snap.data, "observed": {k: v for k, v in snap.data["observed"].items() if k != "files"}}
    snap.save(update_fields=["data"])  # as an older SparkOps stored it
    html = page(viewer_client, "nemotron").content.decode()
    assert "Its text was not kept with this snapshot" in html
    assert observe(box_engines.values()) == []  # the same configuration: no new version
    resp = page(viewer_client, "nemotron")
    assert "later in lexical order: this one wins" in resp.context["files"][2]["text"]
    assert ConfigSnapshot.objects.filter(engine=nemotron).count() == 1
