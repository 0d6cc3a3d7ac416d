"""`sparkops unit fix` against the real systemd 252 user manager (and the simulator's systemd): the audit's
fixes written as drop-ins, reloaded, observed and logged; the units it refuses, and why."""

import io
import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from django.core.management import call_command

from sparkops.changelog.models import Entry

from .conftest import WAIT_S
from .test_units import shown

pytestmark = [pytest.mark.django_db]
PLAN_KEYS = {
    "engine",
    "unit",
    "scope",
    "dropin_dir",
    "fixes",
    "skipped",
    "refused",
    "applied",
    "daemon_reload",
    "entry",
}
FIX_KEYS = {"check", "status", "file", "path", "diff", "settings", "note", "applied"}


def unit_fix(*args):
    """`sparkops unit fix ARGS --json`: (exit status, the JSON it printed)."""
    out = io.StringIO()
    try:
        call_command("unit", "fix", *args, "--json", stdout=out)
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, json.loads(out.getvalue())


def on_disk(path):
    from django.conf import settings

    return Path(settings.SPARKOPS_HOST_ROOT) / path.lstrip("/")


def test_exit0_under_on_failure_fixed_by_the_drop_in_then_restarted(box, engine_of):
    """The field report's night, closed: an engine that exits 0 under Restart=on-failure; `unit fix --apply`
    writes 50-sparkops-restart_always_bounded.conf beside the unit, reloads, and the change log's observed
    entry names the file and each setting; the next exit 0 is restarted by systemd."""
    box.add("fx0", restart="on-failure")
    engine = engine_of(box, "fx0")
    code, preview = unit_fix("fx0", "--check", "restart_always_bounded")
    assert code == 0 and set(preview) == PLAN_KEYS and not preview["applied"], preview
    (fix,) = preview["fixes"]
    assert set(fix) == FIX_KEYS and fix["file"] == "50-sparkops-restart_always_bounded.conf", fix
    assert fix["path"] == os.path.join(preview["dropin_dir"], fix["file"]) and not on_disk(fix["path"]).exists()
    assert preview["dropin_dir"] == os.path.dirname(box.fragment("fx0")) + f"/{engine.unit}.d", preview
    assert fix["diff"].startswith(f"--- /dev/null\n+++ {fix['path']}\n") and "+Restart=always\n" in fix["diff"]
    sections = {(s["section"], s["key"]): s["value"] for s in fix["settings"]}
    assert sections == {
        ("Unit", "StartLimitIntervalSec"): "3600",
        ("Unit", "StartLimitBurst"): "3",
        ("Service", "Restart"): "always",
        ("Service", "RestartSec"): "10",
    }
    fragment = Path(box.fragment("fx0") if box.kind == "real" else on_disk(box.fragment("fx0")))
    before = fragment.read_text()

    code, done = unit_fix("fx0", "--check", "restart_always_bounded", "--apply")
    if box.kind == "real":
        box.files.append(on_disk(fix["path"]))  # removed with the unit at the end
    assert code == 0 and done["applied"] and done["daemon_reload"] == "done" and done["fixes"][0]["applied"], done
    assert fragment.read_text() == before  # the unit file itself is never edited
    text = on_disk(fix["path"]).read_text()
    assert "[Unit]\nStartLimitIntervalSec=3600\nStartLimitBurst=3\n" in text and "[Service]\nRestart=always\n" in text
    shown(box, "fx0", Restart="always")
    raw = box.show("fx0")
    assert raw["StartLimitBurst"] == "3" and fix["path"] in raw["DropInPaths"].split(), raw
    entry = Entry.objects.get(pk=done["entry"]["id"])
    assert entry.kind == "flag_change" and list(entry.engines.all()) == [engine]
    assert f"`Restart=`: on-failure → always (set in {fix['path']})" in entry.body_md, entry.body_md
    assert f"`StartLimitBurst=`: 5 → 3 (set in {fix['path']})" in entry.body_md or (
        f"→ 3 (set in {fix['path']})" in entry.body_md
    ), entry.body_md

    first = shown(box, "fx0", ActiveState="active")["MainPID"]
    box.fault("fx0", "exit0")
    again = shown(box, "fx0", ActiveState="active", NRestarts=1)
    assert again["MainPID"] not in (0, first)
    code, after = unit_fix("fx0", "--check", "restart_always_bounded")
    assert code == 0 and after["fixes"] == [], after  # the check passes now: nothing left to write


def test_refused_without_a_unit_or_for_one_systemd_does_not_know(box, engine_of, db):
    from dashboard.models import Engine

    box.add("fxr")
    engine = engine_of(box, "fxr")
    Engine.objects.create(name="fxr-hand", kind="vllm", url="http://127.0.0.1:9", host=engine.host, status="up")
    code, out = unit_fix("fxr-hand")
    assert code == 1 and "runs outside any systemd unit" in out["refused"] and out["fixes"] == [], out
    err = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("unit", "fix", "fxr-hand", "--apply", stdout=io.StringIO(), stderr=err)
    assert exited.value.code == 1 and err.getvalue().startswith("refused: fxr-hand runs outside any systemd unit")
    gone = f"gone-{uuid.uuid4().hex[:6]}.service"
    Engine.objects.filter(pk=engine.pk).update(unit=gone)
    code, out = unit_fix("fxr", "--apply")
    assert code == 1 and not out["applied"] and out["fixes"] == [], out
    assert f"{gone} is not a unit systemd knows" in out["refused"] or "has not been observed" in out["refused"], out
    code, out = unit_fix("fxr", "--check", "no_such_check")
    assert code == 1 and "no such audit check: no_such_check" in out["refused"], out


def test_refused_where_the_drop_in_directory_cannot_be_written(box, engine_of):
    """A plain file where UNIT.d/ would be: nothing is written, the reason is said, exit 1."""
    box.add("fxw", restart="on-failure")
    engine_of(box, "fxw")
    dropin_dir = on_disk(os.path.dirname(box.fragment("fxw"))) / f"{box.unit('fxw')}.d"
    aside = dropin_dir.with_name(dropin_dir.name + ".aside")
    if dropin_dir.is_dir():  # the simulator's units come with drop-ins: moved aside for the test
        dropin_dir.rename(aside)
    dropin_dir.write_text("not a directory\n")
    try:
        code, out = unit_fix("fxw", "--apply")
        assert code == 1 and "is not a directory" in out["refused"] and not out["applied"], out
        assert out["fixes"] == [] and dropin_dir.read_text() == "not a directory\n"
    finally:
        dropin_dir.unlink()
        if aside.exists():
            aside.rename(dropin_dir)


def test_a_transient_unit_is_refused(real_box, engine_of, db):
    """A unit made by systemd-run has no unit file: no drop-in for it (real only: the simulator has none)."""
    from dashboard.models import Engine, Host

    box = real_box
    name = f"fxt-{uuid.uuid4().hex[:6]}"
    done = subprocess.run(
        ["systemd-run", "--user", f"--unit={name}", "/bin/sleep", "300"],
        env={**os.environ, **box.m.env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    box.units[name] = f"{name}.service"
    from django.conf import settings

    host, _ = Host.objects.get_or_create(name=settings.SPARKOPS_HOST_NAME)
    Engine.objects.create(
        name=name, kind="vllm", url="http://127.0.0.1:9", host=host, unit=f"{name}.service", unit_scope="user"
    )
    assert box.m.show(f"{name}.service", "Transient")["Transient"] == "yes"
    code, out = unit_fix(name, "--apply")
    assert code == 1 and "is a transient unit" in out["refused"] and not out["applied"], out
    assert not list(box.m.unit_dir.glob(f"{name}.service.d"))


def two_engines_after_a_disabled_unit(request, kind, settings, monkeypatch, tmp_path):
    """(first engine's unit, second engine's name, the disabled unit, a cleanup) on one manager: the second
    orders itself After= a unit that is installed but disabled."""
    if kind == "sim":
        from simulator.client import Simulation
        from tests.simbox import point_collectors_at

        sim = Simulation(
            engines=["vllm:ord-a", "llamacpp:ord-b"], state_dir=tmp_path / "sim", ready_timeout=WAIT_S
        ).__enter__()
        request.addfinalizer(sim.stop)
        point_collectors_at(sim, settings, monkeypatch, gpu=False)
        return sim, "demo-vision.service"  # the simulated llama.cpp unit orders itself after it
    from .conftest import RealBox
    from .test_launch import disabled_unit

    box = RealBox(request.getfixturevalue("user_manager"), settings, monkeypatch)
    request.addfinalizer(box.close)
    box.add("ord-a")
    box.add("ord-b")
    off = disabled_unit(box)
    box.dropin("ord-b", "30-order.conf", f"[Unit]\nAfter={off}\n")
    return box, off


@pytest.mark.parametrize("kind", ["real", "sim"])
def test_after_a_disabled_unit_the_fixs_edge_names_a_live_engine_unit(request, kind, settings, monkeypatch, tmp_path):
    from dashboard.models import Engine, Host

    box, off = two_engines_after_a_disabled_unit(request, kind, settings, monkeypatch, tmp_path)
    host, _ = Host.objects.get_or_create(name=settings.SPARKOPS_HOST_NAME)
    engines = {}
    for name, k in (("ord-a", "vllm"), ("ord-b", "llamacpp" if kind == "sim" else "vllm")):
        engines[name] = Engine.objects.create(
            name=name, kind=k, url=box.url(name), host=host, unit=box.unit(name), unit_scope="user", status="up"
        )
    code, out = unit_fix("ord-b", "--check", "after_enabled_units", "--apply")
    assert code == 0 and out["applied"], out
    (fix,) = out["fixes"]
    if kind == "real":
        box.files.append(on_disk(fix["path"]))
    assert fix["settings"] == [{"section": "Unit", "key": "After", "value": box.unit("ord-a")}], fix
    assert off in fix["note"] and "cannot take an After= back" in fix["note"], fix
    after = box.show("ord-b")["After"].split()
    assert box.unit("ord-a") in after and off in after, after
    entry = Entry.objects.get(pk=out["entry"]["id"])
    line = next(li for li in entry.body_md.splitlines() if li.startswith("- `After=`"))
    assert line.endswith(f"{fix['path']})") and box.unit("ord-a") in line, entry.body_md
    code, first = unit_fix("ord-a", "--check", "after_enabled_units", "--check", "cold_starts_serialized")
    assert code == 0 and first["fixes"] == [], first  # ordered now: no edge back (never a cycle)


PER_ENGINE = (
    "restart_always_bounded",
    "compile_caps",
    "cuda_on_path",
    "readiness_budget",
    "memory_max_set",
    "stop_hook",
)


def _audit(engine):
    from sparkops.audit.run import audit
    from sparkops.launch.observer import observe_now

    observe_now(engine)
    return {r.check: r for r in audit([engine], only_engine=engine)}


def test_every_per_engine_fix_applied_makes_its_check_pass_and_the_gate_holds_the_start(real_box, engine_of):
    """A bare unit (no caps, no CUDA on PATH, no readiness helper, no MemoryMax, Restart=on-failure, no stop
    hook): one `unit fix --apply` writes six drop-ins, the audit then passes each of those checks, and the restarted
    unit goes active only after `sparkops wait-ready` (its new ExecStartPost=) saw the engine serve; the stop
    hook it now runs at every stop, with no worker listening, fails nothing."""
    from sparkops.collectors.systemd import journal_read
    from tests.waiting import wait_for

    box = real_box
    box.add("bare", restart="on-failure")
    engine = engine_of(box, "bare")
    before = _audit(engine)
    assert {k: before[k].status for k in PER_ENGINE} == {
        "restart_always_bounded": "fail",
        "compile_caps": "fail",
        "cuda_on_path": "fail",
        "readiness_budget": "warn",
        "memory_max_set": "fail",
        "stop_hook": "warn",
    }, {k: before[k].evidence for k in PER_ENGINE}
    code, out = unit_fix("bare", "--apply")
    for fix in out["fixes"]:
        box.files.append(on_disk(fix["path"]))
    assert code == 0 and out["applied"], out
    assert {f["check"] for f in out["fixes"]} == set(PER_ENGINE), out
    settings = {(s["key"], s["value"].partition("=")[0]) for f in out["fixes"] for s in f["settings"]}
    assert {("Environment", n) for n in ("MAX_JOBS", "NVCC_THREADS", "PATH", "CUDA_HOME")} <= settings, settings
    after = _audit(engine)
    # the environment's fixes are in the unit, not yet in the running process: applied, pass after the restart
    pending = {"compile_caps", "cuda_on_path"}
    assert {k: after[k].status for k in PER_ENGINE} == {k: "applied" if k in pending else "pass" for k in PER_ENGINE}, {
        k: after[k].evidence for k in PER_ENGINE
    }
    raw = box.show("bare")
    assert "wait-ready" in raw["ExecStartPost"] and raw["TimeoutStartUSec"] == "16min", raw
    assert "sparkops.controls.stopped --socket " in raw["ExecStopPost"], raw
    entry = Entry.objects.get(pk=out["entry"]["id"])
    for fix in out["fixes"]:
        assert fix["path"] in entry.body_md, (fix["path"], entry.body_md)
    assert "`ExecStopPost=`:  → " in entry.body_md and "sparkops.controls.stopped --socket" in entry.body_md, (
        entry.body_md
    )

    box.restart("bare")
    shown(box, "bare", ActiveState="active", SubState="running")
    box.wait_ready("bare")
    texts: list = []

    def gate_said():
        entries, _ = journal_read(user_units=[box.unit("bare")], first_lines=500)
        texts[:] = [str(e.get("MESSAGE")) for e in entries]
        return any(t.startswith("sparkops wait-ready:") for t in texts)

    assert wait_for(gate_said, timeout=WAIT_S), texts[-20:]  # the gate ran and said so in the unit's journal
    restarted = _audit(engine)
    assert {k: restarted[k].status for k in PER_ENGINE} == dict.fromkeys(PER_ENGINE, "pass"), {
        k: restarted[k].evidence for k in PER_ENGINE
    }


@pytest.mark.parametrize("kind", ["sim"])
def test_the_simulated_units_fixes_make_their_checks_pass(kind, settings, monkeypatch, tmp_path, db):
    """The simulator's SGLang unit (caps partly set, no MemoryMax) and llama.cpp unit (its helper's budget past
    TimeoutStartSec): the drop-ins go into the simulated /etc/systemd/system, its daemon-reload takes them."""
    from dashboard.models import Engine, Host
    from simulator.client import Simulation
    from tests.simbox import point_collectors_at

    with Simulation(engines=["sglang:fx-s", "llamacpp:fx-t"], state_dir=tmp_path / "sim", ready_timeout=WAIT_S) as sim:
        point_collectors_at(sim, settings, monkeypatch, gpu=False)
        host = Host.objects.create(name=settings.SPARKOPS_HOST_NAME)
        engines = {
            name: Engine.objects.create(
                name=name, kind=k, url=sim.url(name), host=host, unit=sim.unit(name), status="up"
            )
            for name, k in (("fx-s", "sglang"), ("fx-t", "llamacpp"))
        }
        want = {"fx-s": ("compile_caps", "memory_max_set"), "fx-t": ("readiness_budget", "memory_max_set")}
        for name, checks in want.items():
            before = _audit(engines[name])
            assert all(before[c].status == "fail" for c in checks), {c: before[c].evidence for c in checks}
            code, out = unit_fix(name, *[a for c in checks for a in ("--check", c)], "--apply")
            assert code == 0 and out["applied"] and {f["check"] for f in out["fixes"]} == set(checks), out
            after = _audit(engines[name])
            assert all(after[c].status in ("pass", "applied") for c in checks), {c: after[c].evidence for c in checks}
            sim.restart(name)  # an environment fix takes effect at the next restart
            sim.wait_ready(name, timeout=WAIT_S)
            after = _audit(engines[name])
            assert all(after[c].status == "pass" for c in checks), {c: after[c].evidence for c in checks}
        caps = (on_disk(sim.show("fx-s")["FragmentPath"] + ".d") / "50-sparkops-compile_caps.conf").read_text()
        assert "Environment=NVCC_THREADS=1" in caps and "MAX_JOBS" not in caps  # the unit's MAX_JOBS=4 is kept
