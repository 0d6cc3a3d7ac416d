"""Launch observation and the launch audit against the real systemd 252 user manager (and the same
against the simulator's systemd): `After=` edges to units that are disabled or absent, the effective
environment with the file that set each variable, the restart budget from the manager's timestamps."""

import uuid
from pathlib import Path

import pytest

from sparkops.audit.run import audit
from sparkops.launch.observer import Observer
from sparkops.launch.snapshot import latest_snapshot
from tests.waiting import wait_for

from .conftest import WAIT_S

pytestmark = [pytest.mark.django_db]


def observed(engine):
    """ENGINE's launch configuration observed now (the poller's Observer, the product's own reading)."""
    Observer().observe([engine])
    snap = latest_snapshot(engine)
    assert snap is not None, f"no snapshot of {engine.name}"
    return snap.data


def served(engine=None):
    """The stored starts that served (a first healthy answer), of ENGINE or of every engine: a start
    that ended without serving has its own row, with no healthy_at."""
    from dashboard.models import EngineStart

    rows = EngineStart.objects.filter(healthy_at__isnull=False)
    return rows if engine is None else rows.filter(engine=engine)


def audit_result(engine, key):
    found = [r for r in audit([engine], only_engine=engine) if r.check == key]
    assert len(found) == 1, found
    return found[0]


def disabled_unit(box):
    """A unit that is installed but not enabled: the simulator's demo-vision.service; for the real
    manager a unit file with an [Install] section that nobody enabled."""
    if box.kind == "sim":
        return "demo-vision.service"
    name = f"offline-{uuid.uuid4().hex[:6]}.service"
    box.files.append(
        box.m.write_unit(
            name,
            "[Unit]\nDescription=installed, never enabled\n[Service]\nExecStart=/bin/true\n"
            "[Install]\nWantedBy=default.target\n",
        )
    )
    return name


def test_after_a_disabled_unit_and_a_missing_unit_fails_the_audit(box, engine_of):
    box.add("aft")
    engine = engine_of(box, "aft")
    off, gone = disabled_unit(box), f"gone-{uuid.uuid4().hex[:6]}.service"
    path = box.dropin("aft", "30-order.conf", f"[Unit]\nAfter={off} {gone}\n")
    data = observed(engine)
    unit = data["unit"]
    assert off in unit["edges"]["After"] and gone in unit["edges"]["After"], unit["edges"]
    states = unit["edge_states"]
    assert states[off]["LoadState"] == "loaded" and states[off]["UnitFileState"] == "disabled", states
    assert states[gone]["LoadState"] == "not-found" and states[gone]["UnitFileState"] == "", states
    result = audit_result(engine, "after_enabled_units")
    assert result.status == "fail", result
    assert f"{off}: loaded/disabled" in result.evidence, result.evidence
    assert f"{gone}: not-found/not installed" in result.evidence, result.evidence
    assert path in result.evidence, result.evidence


def env_file(box, name, text):
    """Write an EnvironmentFile for BOX's engine NAME; the path as its unit names it."""
    if box.kind == "sim":
        rel = f"etc/default/{name}-caps"
        (box.sims[name].root / rel).write_text(text)
        return "/" + rel
    path = box.m.root / f"{name}-{uuid.uuid4().hex[:6]}.env"
    path.write_text(text)
    box.files.append(path)
    return str(path)


def proc_environ(pid):
    """The environment process PID runs with ($SPARKOPS_PROC_ROOT/PID/environ: the kernel's, or the
    simulator's copy of it)."""
    from django.conf import settings

    raw = Path(f"{settings.SPARKOPS_PROC_ROOT}/{pid}/environ").read_bytes()
    return dict(w.decode().partition("=")[::2] for w in raw.split(b"\0") if b"=" in w)


def test_environment_and_environment_files_in_the_effective_environment(box, engine_of):
    """Environment= lines in order, then EnvironmentFile= files over them (whatever the order of the
    lines): the observed environment names the file that set each variable, and is what the manager
    gave the engine's process. A shell's `export NAME=…` line in an EnvironmentFile is ignored by
    systemd 252 ("Ignoring invalid environment assignment"), so the Environment= value stays."""
    from tests.realsystemd.test_units import shown

    box.add("env", start=False)
    engine = engine_of(box, "env")
    caps = env_file(box, "env", "# compile caps\nTORCHINDUCTOR_COMPILE_THREADS=16\nexport NVCC_THREADS='1'\n")
    path = box.dropin(
        "env",
        "40-env.conf",
        "[Service]\n"
        f"EnvironmentFile={caps}\n"
        'Environment="PATH=/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin" CUDA_HOME=/usr/local/cuda\n'
        "Environment=MAX_JOBS=4 NVCC_THREADS=2 TORCHINDUCTOR_COMPILE_THREADS=4 FLASHINFER_NVCC_THREADS=1\n"
        "EnvironmentFile=-/nonexistent/sparkops-optional.env\n",
    )
    box.restart("env")
    box.wait_ready("env")
    pid = shown(box, "env", ActiveState="active")["MainPID"]
    data = observed(engine)
    env, origins = data["environment"], data["environment_origins"]
    want = {
        "PATH": ("/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin", path),
        "CUDA_HOME": ("/usr/local/cuda", path),
        "MAX_JOBS": ("4", path),
        "FLASHINFER_NVCC_THREADS": ("1", path),
        "TORCHINDUCTOR_COMPILE_THREADS": ("16", caps),  # the file wins over the later Environment=
        "NVCC_THREADS": ("2", path),  # systemd ignores the file's `export NVCC_THREADS=1` line
    }
    assert {k: (env.get(k), origins.get(k)) for k in want} == want, (env, origins)
    files = {f["path"]: f for f in data["unit"]["environment_files"]}
    assert files[caps]["readable"] and not files[caps]["optional"], files
    assert files["/nonexistent/sparkops-optional.env"]["optional"], files
    assert not files["/nonexistent/sparkops-optional.env"]["readable"], files
    running = proc_environ(pid)
    assert {k: running.get(k) for k in want} == {k: v for k, (v, _) in want.items()}, running
    caps_result = audit_result(engine, "compile_caps")
    assert caps_result.status == "fail" and caps_result.evidence == (
        "NVCC_THREADS=2 (cap 1); TORCHINDUCTOR_COMPILE_THREADS=16 (cap 4)"
    ), caps_result
    cuda = audit_result(engine, "cuda_on_path")
    assert cuda.status == "pass" and cuda.evidence == "PATH has /usr/local/cuda/bin, CUDA_HOME=/usr/local/cuda", cuda


def cold_on_first_start(box, name, seconds):
    """BOX's engine NAME (not yet started) starts cold once: a JIT compile of SECONDS with compilers
    in its unit's cgroup (the simulator's cold_seconds; for the real manager an ExecStart that, while a
    marker file is there, runs a `ninja` — /bin/sleep by that name — beside a slower load)."""
    if box.kind == "sim":  # its units start at boot: stopped, and the JIT cache emptied again
        sim = box.sims[name]
        sim.stop_unit(name)
        assert wait_for(lambda: box.show(name)["ActiveState"] == "inactive", timeout=WAIT_S)
        sim.cold(name)
        return
    bin_dir = box.m.root / "bin"
    bin_dir.mkdir(exist_ok=True)
    ninja = bin_dir / "ninja"
    if not ninja.exists():
        ninja.symlink_to("/bin/sleep")
    marker = box.m.root / f"{name}-jit-cold"
    marker.touch()
    box.files.append(marker)
    script = (
        f"if [ -e {marker} ]; then rm -f {marker}; {ninja} {seconds} & L={seconds}; else L=0.2; fi; "
        f"exec {box.engine_argv(name)} --load-seconds $$L"
    )
    box.dropin(name, "50-jit.conf", f"[Service]\nExecStart=\nExecStart=/bin/sh -c '{script}'\n")


def stamps(engine):
    """The start timestamps of ENGINE's unit as the product reads them (`systemctl --user show
    --timestamp=us+utc`): microseconds, so a start is timed below the second."""
    from sparkops.collectors.systemd import units_show
    from sparkops.launch.starts import parse_timestamp

    props = units_show([engine.unit], scope="user")[engine.unit]
    keys = ("InactiveExitTimestamp", "ExecMainStartTimestamp", "ActiveEnterTimestamp")
    assert all(props.get(k) and "." in props[k] and props[k].endswith(" UTC") for k in keys), props
    return {k: parse_timestamp(props[k]) for k in keys}


def test_the_restart_budget_from_the_managers_timestamps_cold_then_warm(box, engine_of):
    """The poller's StartTracker fed the product's own `systemctl --user show` and compiler scan, and
    the engine's answers: each start stored from the manager's InactiveExitTimestamp and
    ActiveEnterTimestamp to the first healthy answer, cold (compilers seen in the unit) then warm."""
    from django.utils import timezone

    from sparkops.collectors.processes import read_compilers
    from sparkops.collectors.systemd import units_show
    from sparkops.launch.starts import StartTracker, restart_budget
    from tests.realsystemd.conftest import _healthy

    # 6 s of compilers: long enough for a tick's compiler scan to see them at a load average of 20
    box.add("bud", start=False, **({"cold_seconds": 6} if box.kind == "sim" else {}))
    cold_on_first_start(box, "bud", 6)
    box.dropin("bud", "55-no-helper.conf", "[Service]\nExecStartPost=\n")  # active as soon as it runs, in both
    engine = engine_of(box, "bud")
    engine.status, engine.last_ok_at = "down", None
    engine.save()
    tracker, seen = StartTracker(), {}

    def tick(count):
        props = units_show([engine.unit], scope="user")
        seen.update(props[engine.unit])
        if _healthy(engine.url):
            engine.status, engine.last_ok_at = "up", timezone.now()
        else:
            engine.status = "down"
        tracker.track([engine], props, read_compilers())
        return served(engine).count() >= count

    tick(1)
    box.restart("bud")
    assert wait_for(lambda: tick(1), timeout=WAIT_S, step=0.2), seen
    cold = served(engine).get()
    raw = stamps(engine)
    assert cold.kind == "cold" and cold.compilers_max >= 1, (cold.kind, cold.compilers_max)
    assert cold.started_at == min(raw["InactiveExitTimestamp"], raw["ExecMainStartTimestamp"]), raw
    assert cold.active_at == raw["ActiveEnterTimestamp"], raw
    assert cold.started_at <= raw["ExecMainStartTimestamp"] <= cold.active_at <= cold.healthy_at
    assert 2 <= cold.duration_s < WAIT_S, cold.duration_s
    box.restart("bud")
    assert wait_for(lambda: tick(2), timeout=WAIT_S, step=0.2), seen
    warm = served(engine).order_by("-started_at", "-pk").first()
    raw = stamps(engine)
    assert warm.kind == "warm" and warm.compilers_max == 0, (warm.kind, warm.compilers_max)
    assert warm.started_at == min(raw["InactiveExitTimestamp"], raw["ExecMainStartTimestamp"]) >= cold.started_at
    assert warm.active_at == raw["ActiveEnterTimestamp"], raw
    assert warm.started_at <= raw["ExecMainStartTimestamp"] <= warm.active_at <= warm.healthy_at
    assert warm.duration_s < cold.duration_s, (warm.duration_s, cold.duration_s)
    budget = restart_budget(engine)["classes"]
    assert budget["cold"]["n"] == budget["warm"]["n"] == 1, budget


def test_a_start_is_measured_from_inactive_exit_before_exec_start_pre(real_box, engine_of):
    """An ExecStartPre= that takes 2 s (a model fetch, a cache check): the real manager leaves inactive
    (InactiveExitTimestamp) 2 s before ExecMainStartTimestamp, and the start is measured from the first.
    Real only: the simulator runs no ExecStartPre=."""
    from django.utils import timezone

    from sparkops.collectors.systemd import units_show
    from sparkops.launch.starts import StartTracker
    from tests.realsystemd.conftest import _healthy

    box = real_box
    box.add("pre", start=False)
    box.dropin("pre", "20-pre.conf", "[Service]\nExecStartPre=/bin/sleep 2\n")
    engine = engine_of(box, "pre")
    engine.status, engine.last_ok_at = "down", None
    engine.save()
    tracker = StartTracker()

    def tick():
        props = units_show([engine.unit], scope="user")
        if _healthy(engine.url):
            engine.status, engine.last_ok_at = "up", timezone.now()
        tracker.track([engine], props, {})
        return served(engine).exists()

    tick()
    box.restart("pre")
    assert wait_for(tick, timeout=WAIT_S, step=0.2)
    start, raw = served(engine).get(), stamps(engine)
    began, main = raw["InactiveExitTimestamp"], raw["ExecMainStartTimestamp"]
    assert start.started_at == began and (main - began).total_seconds() >= 2, raw
    assert start.active_at == raw["ActiveEnterTimestamp"] >= main, raw
    assert start.duration_s >= 2, start.duration_s


def ticker(engines, tracker):
    """One poller tick for ENGINES: the product's `systemctl --user show` of their units and compiler
    scan, each engine's answer, fed to TRACKER; the properties read."""
    from django.utils import timezone

    from sparkops.collectors.processes import read_compilers
    from sparkops.collectors.systemd import units_show
    from tests.realsystemd.conftest import _healthy

    props = units_show([e.unit for e in engines], scope="user")
    for e in engines:
        if _healthy(e.url):
            e.status, e.last_ok_at = "up", timezone.now()
        else:
            e.status = "down"
    tracker.track(engines, props, read_compilers())
    return props


def down_engine(box, engine_of, name):
    engine = engine_of(box, name)
    engine.status, engine.last_ok_at = "down", None
    engine.save()
    return engine


def test_a_start_behind_a_readiness_helper_is_stored_with_its_active_time(box, engine_of):
    """A helper in ExecStartPost= that warms the engine up for 5 s after its first answer: the poller
    sees the engine answer while systemd still calls the unit activating. The start is stored once the
    unit is active, with its ActiveEnterTimestamp, timed to the first answer (before it)."""
    from sparkops.launch.starts import StartTracker

    box.add("hlp", start=False, load_seconds=1)
    box.helper("hlp", 60, extra="--warmup 5")  # 5 s: a tick at a load average of 20 takes more than 1
    engine = down_engine(box, engine_of, "hlp")
    tracker, answered_while_activating = StartTracker(), []

    def tick():
        props = ticker([engine], tracker)[engine.unit]
        if engine.status == "up" and props["ActiveState"] == "activating":
            answered_while_activating.append(props["SubState"])
        return served(engine).exists()

    tick()
    box.restart("hlp")
    assert wait_for(tick, timeout=WAIT_S, step=0.1)
    assert answered_while_activating and set(answered_while_activating) == {"start-post"}, answered_while_activating
    start, raw = served(engine).get(), stamps(engine)
    assert start.active_at is not None and start.active_at == raw["ActiveEnterTimestamp"], (start.active_at, raw)
    assert start.started_at <= start.healthy_at < start.active_at, (start.started_at, start.healthy_at, raw)
    assert (start.active_at - start.healthy_at).total_seconds() >= 1, (start.healthy_at, start.active_at)


def test_two_engines_that_cold_start_at_once_are_each_measured_and_flagged_as_overlapping(box, engine_of):
    """Item 5: two units started by one request, both cold (compilers in each unit's cgroup), each
    behind its own readiness helper with its own budget. Each start is stored with its budget, both
    start in the same second, and the overlap rule flags two cold starts on one box."""
    from sparkops.alerts.models import AlertEvent
    from sparkops.launch.observer import Observer
    from sparkops.launch.starts import StartTracker, restart_budget

    names = ("ca", "cb")
    # 6 s of compilers: long enough for a tick's compiler scan to see them at a load average of 20
    box.add_together(names, start=False, **({"cold_seconds": 6} if box.kind == "sim" else {}))
    budgets = {"ca": 60, "cb": 90}
    for name in names:
        cold_on_first_start(box, name, 6)
        box.helper(name, budgets[name])
    engines = [down_engine(box, engine_of, n) for n in names]
    observer = Observer()  # the launch snapshots, where each start's budget is read from (an engine down
    for _ in range(2):  # is snapshotted at its second sighting: the first may be a start under way)
        observer.observe(engines)
    tracker = StartTracker()
    ticker(engines, tracker)
    box.start_together(names)
    assert wait_for(lambda: ticker(engines, tracker) and served().count() >= 2, timeout=WAIT_S, step=0.2)
    starts = {s.engine.name: s for s in served().select_related("engine")}
    assert set(starts) == set(names), starts
    for name, start in starts.items():
        assert start.kind == "cold" and start.compilers_max >= 1, (name, start.kind, start.compilers_max)
        assert start.budget_s == budgets[name], (name, start.budget_s)
        assert start.active_at is not None and start.duration_s >= 2, (name, start.active_at, start.duration_s)
        assert restart_budget(start.engine)["classes"]["cold"]["n"] == 1
    a, b = starts["ca"], starts["cb"]
    assert abs((a.started_at - b.started_at).total_seconds()) < 1, (a.started_at, b.started_at)
    assert a.started_at < b.healthy_at and b.started_at < a.healthy_at  # overlapping
    event = AlertEvent.objects.get(rule="cold_starts_overlap", state="firing")
    assert "ca" in event.message and "cb" in event.message and "cold-started at once" in event.message, event.message


def test_a_start_of_a_never_started_unit_is_measured_even_when_it_answers_by_the_next_tick(box, engine_of):
    """The tracker first sees the unit never started (or collected: no ExecMainStartTimestamp), then,
    at its next tick, already active and answering (a small model loads in a blink): that is a start
    it saw begin, stored from the manager's timestamps (it was dropped as "already up when first
    seen" — the real llama-server under a unit showed it)."""
    from sparkops.launch.starts import StartTracker

    box.add("fst", start=False)
    box.dropin("fst", "55-no-helper.conf", "[Service]\nExecStartPost=\n")
    if box.kind == "sim":  # its units start at boot: stopped, it is collected and reads never started
        box.sims["fst"].stop_unit("fst")
        assert wait_for(lambda: box.show("fst")["ActiveState"] == "inactive", timeout=WAIT_S)
    engine = down_engine(box, engine_of, "fst")
    tracker = StartTracker()
    props = ticker([engine], tracker)[engine.unit]
    assert props["ActiveState"] == "inactive" and props["ExecMainStartTimestamp"] is None, props
    box.restart("fst")
    box.wait_ready("fst")
    assert wait_for(lambda: box.show("fst")["ActiveState"] == "active", timeout=WAIT_S)
    props = ticker([engine], tracker)[engine.unit]  # its first sight of the start: active, answering
    assert engine.status == "up" and props["ActiveState"] == "active", props
    start, raw = served(engine).get(), stamps(engine)
    assert start.started_at == min(raw["InactiveExitTimestamp"], raw["ExecMainStartTimestamp"]), raw
    assert start.active_at == raw["ActiveEnterTimestamp"] and start.kind == "warm", (start.active_at, raw)
