"""Issue 47: the controls that fooled an operator, on the real systemd 252 user manager.

1. A hand-run engine already serves the unit's port: the gate (`sparkops wait-ready` in the unit's
   ExecStartPost=) must not call the unit ready on the other process's answers; it fails naming
   the pid and command that hold the port; `sparkops launch` the same.
5. `--budget` just below TimeoutStartSec= (29.9 against 30) is refused, naming both numbers.
8. `wait-ready --unit nosuch.service --user` says the unit does not exist."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from simulator.supervisor import REPO_ROOT
from sparkops.ports import free_port
from tests.waiting import wait_for

from .conftest import WAIT_S, _healthy
from .test_controls import (
    SPARKOPS,
    gate_lines,
    journal_once,
    launcher,  # noqa: F401  (the fixture)
    read_until,
    shown,
    unit_story,
    wait_ready_post,
)


def hand_run(port, name="handrun"):
    """A simulated vLLM serving PORT from a shell: no unit, this test's child."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "simulator.engine", "--kind", "vllm", "--name", name, "--port", str(port)],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert wait_for(lambda: _healthy(f"http://127.0.0.1:{port}"), timeout=WAIT_S), "the hand-run engine never served"
    return proc


def stop(proc):
    proc.kill()
    proc.wait()


# --- 1. the gate checks the engine's own socket ---------------------------------------------------


def test_the_gate_does_not_call_a_unit_ready_on_another_processes_port_and_names_it(real_box):
    """The unit's own engine never listens (it loads for ever); a hand-run engine answers on its port
    the whole time. Before issue 47 the gate said "ready after 0.3 s" and the unit went active; now
    it waits, and at its budget fails the start naming the pid and command holding the port."""
    box = real_box
    box.add("shadowed", start=False, restart="no", load_seconds=100000)
    box.dropin("shadowed", "20-service.conf", "[Service]\nTimeoutStartSec=40\n")
    other = hand_run(box.ports["shadowed"])
    try:
        wait_ready_post(box, "shadowed", 3)
        box.m.systemctl("start", "--no-block", box.unit("shadowed"))
        failed = shown(box, "shadowed", ActiveState="failed", journal=lambda: unit_story(box, "shadowed"))
        assert failed["Result"] == "exit-code", failed
        lines = journal_once(
            lambda: gate_lines(box, "shadowed"),
            lambda got: bool(got) and "failed:" in got[-1],
            lambda: unit_story(box, "shadowed"),
        )
    finally:
        stop(other)
    port = box.ports["shadowed"]
    assert not any("ready after" in line for line in lines), lines
    assert f"port {port} must be unit {box.unit('shadowed')}'s own" in lines[0], lines
    last = lines[-1]
    assert "failed: not serving after 3." in last, lines
    assert f"port {port} is served by pid {other.pid} (" in last and "simulator.engine" in last, last
    assert f"not by unit {box.unit('shadowed')}'s processes" in last, last


def test_the_units_engine_dying_on_address_in_use_fails_the_gate_with_the_ports_owner(real_box):
    """The issue's own case: the unit's engine loads, then exits 1 on "address already in use"; the
    gate never said ready, so the unit ordered after it never started, and the verdict names who
    serves the port."""
    box = real_box
    box.add("late", start=False, restart="no", load_seconds=1)
    box.dropin("late", "20-service.conf", "[Service]\nTimeoutStartSec=40\n")
    box.add("after", start=False)
    box.dropin("after", "30-order.conf", f"[Unit]\nAfter={box.unit('late')}\nRequires={box.unit('late')}\n")
    other = hand_run(box.ports["late"])
    try:
        wait_ready_post(box, "late", 30)
        box.m.systemctl("start", "--no-block", box.unit("late"), box.unit("after"))
        failed = shown(box, "late", ActiveState="failed", journal=lambda: unit_story(box, "late"))
        lines = journal_once(
            lambda: gate_lines(box, "late"),
            lambda got: bool(got) and "failed:" in got[-1],
            lambda: unit_story(box, "late"),
        )
        after = box.show("after")
    finally:
        stop(other)
    assert failed["Result"] == "exit-code", failed
    assert not any("ready after" in line for line in lines), lines
    assert "failed: main process" in lines[-1] and "is gone after" in lines[-1], lines
    assert f"port {box.ports['late']} is served by pid {other.pid}" in lines[-1], lines[-1]
    assert after["ActiveState"] != "active" and after.get("ExecMainStartTimestampMonotonic", "0") == "0", after


def test_the_gate_still_says_ready_when_the_unit_serves_its_own_port(real_box):
    """The check does not block the ordinary case: the unit's engine holds its port, ready."""
    box = real_box
    box.add("own", start=False, restart="no", load_seconds=0.5)
    wait_ready_post(box, "own", 30)
    box.m.systemctl("start", "--no-block", box.unit("own"))
    shown(box, "own", ActiveState="active", journal=lambda: unit_story(box, "own"))
    lines = journal_once(
        lambda: gate_lines(box, "own"), lambda got: any("ready after" in x for x in got), lambda: unit_story(box, "own")
    )
    assert f"port {box.ports['own']} must be unit {box.unit('own')}'s own" in lines[0], lines


def test_a_gate_run_by_hand_for_a_unit_checks_that_units_processes(real_box):
    """`--unit X --user` from a shell: the unit's cgroup and main pid from systemctl show. The
    hand-run engine serves the port; the unit (running, not listening) does not own it."""
    box = real_box
    box.add("byhand", start=False, restart="no", load_seconds=100000)
    other = hand_run(box.ports["byhand"])
    try:
        box.m.systemctl("start", "--no-block", box.unit("byhand"))
        shown(box, "byhand", ActiveState="active")
        by_unit = ["--unit", box.unit("byhand"), "--user"]
        done = subprocess.run(
            [SPARKOPS, "wait-ready", "--url", box.url("byhand"), "--kind", "vllm", "--budget", "2", *by_unit],
            env={k: v for k, v in {**os.environ, **box.m.env}.items() if k != "MAINPID"},
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            check=False,
        )
    finally:
        stop(other)
    assert done.returncode == 1, done
    assert f"port {box.ports['byhand']} is served by pid {other.pid}" in done.stdout.splitlines()[-1], done.stdout


# --- 1. the same rule for sparkops launch -------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_launch_onto_a_port_another_process_serves_is_not_called_ready(launcher):
    """The launched engine cannot bind (the hand-run one holds the port) and exits: the watcher
    records it gone, naming who serves the port, not "ready" from the other engine's answers."""
    from dashboard.models import Launch

    port = free_port()
    other = hand_run(port)
    try:
        proc = launcher.start(
            env={"SIM_LOAD_SECONDS": "0.5"},
            engine_argv=["vllm", "serve", "m", "--port", str(port), "--gpu-memory-utilization", "0.1"],
        )
        lines: list[str] = []
        assert read_until(proc, "the box's start lock is released", lines), lines
        row = Launch.objects.get()
    finally:
        stop(other)
    assert row.outcome == "died" and row.ready_at is None, (row.outcome, row.outcome_line)
    assert f"port {port} is served by pid {other.pid}" in lines[-1], lines
    assert f"port {port} is served by pid {other.pid}" in row.outcome_line, row.outcome_line


# --- 5 and 8: the budget's margin, a unit that does not exist ------------------------------------


def _by_hand(box, *args):
    return subprocess.run(
        [SPARKOPS, "wait-ready", "--url", "http://127.0.0.1:1", *args],
        env={k: v for k, v in {**os.environ, **box.m.env}.items() if k != "MAINPID"},
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )


def test_a_budget_inside_the_gates_start_up_margin_is_refused_naming_both_numbers(real_box):
    box = real_box
    box.add("edge", start=False, restart="no", load_seconds=100000)
    box.dropin("edge", "20-service.conf", "[Service]\nTimeoutStartSec=30\n")
    done = _by_hand(box, "--budget", "29.9", "--unit", box.unit("edge"), "--user")
    assert done.returncode == 2 and done.stdout == "", done
    assert f"--budget 29.9 s is not below TimeoutStartSec 30 s of {box.unit('edge')}" in done.stderr, done.stderr
    assert "start-up margin of 2 s (at most 28 s)" in done.stderr, done.stderr
    accepted = _by_hand(box, "--budget", "0.5", "--unit", box.unit("edge"), "--user")
    assert accepted.returncode == 1 and "wait-ready: refused:" not in accepted.stdout + accepted.stderr, accepted


def test_wait_ready_for_a_unit_that_does_not_exist_says_so(real_box):
    done = _by_hand(real_box, "--budget", "5", "--unit", "nosuch.service", "--user")
    assert done.returncode == 2 and done.stdout == "", done
    assert "unit nosuch.service does not exist in the user manager" in done.stderr, done.stderr
    assert "TimeoutStartSec" not in done.stderr, done.stderr


# --- 6 and 7: every command SparkOps prints for a user unit works pasted -------------------------


def paste(box, command, home):
    """COMMAND as an operator pastes it into a shell on the box: HOME elsewhere than the manager's
    XDG_CONFIG_HOME (as on a box whose user manager reads its units from another place)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAINPID", "XDG_CONFIG_HOME")}
    return subprocess.run(
        ["bash", "-c", command],
        env={**env, **box.m.env, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )


@pytest.mark.django_db
def test_the_cards_commands_pasted_into_the_real_manager_bring_a_unit_back_and_write_its_drop_in(
    real_box, engine_of, tmp_path
):
    """A unit past its start limit: the card's start-limit command, pasted, starts it (a bare
    `systemctl reset-failed` or a restart would not); its drop-in command writes where the user
    manager reads ($XDG_CONFIG_HOME, not ~/.config) and takes effect; once observed with
    Restart=always the card no longer offers that drop-in."""
    from dashboard.unit_actions import fix_commands
    from sparkops.launch.observer import Observer

    box = real_box
    box.add(
        "paste",
        restart="on-failure",
        unit_opts={"restart_sec": 0.1, "start_limit_burst": 2, "start_limit_interval": 300},
    )
    engine = engine_of(box, "paste")
    box.fault("paste", "crash")
    shown(box, "paste", ActiveState="active", NRestarts="1")
    box.wait_ready("paste")
    box.fault("paste", "crash")
    shown(box, "paste", ActiveState="failed")
    commands = dict(fix_commands(engine))
    again = commands["After “start request repeated too quickly” (start limit hit)"]
    done = paste(box, again, tmp_path)
    assert done.returncode == 0, (again, done)
    shown(box, "paste", ActiveState="active", SubState="running")
    dropin = next(c for label, c in commands.items() if "Restart=always" in label)
    done = paste(box, dropin, tmp_path)
    assert done.returncode == 0, (dropin, done)
    written = box.m.unit_dir / f"{box.unit('paste')}.d" / "50-sparkops-restart_always_bounded.conf"
    box.files.append(written)
    assert written.exists() and not (tmp_path / ".config").exists(), (dropin, list(tmp_path.iterdir()))
    assert box.show("paste")["Restart"] == "always"
    Observer().observe([engine])
    assert not any("Restart=always" in label for label, _ in fix_commands(engine)), fix_commands(engine)


@pytest.mark.django_db
def test_the_audits_readiness_fix_pasted_into_a_unit_runs_the_gate(real_box, engine_of):
    """The audit's readiness fix names the gate by its absolute path with its real options: pasted
    into a drop-in (its BUDGET filled in) the unit's start runs it (no 203/EXEC) and it says ready."""
    from sparkops.audit.checks import CHECKS

    box = real_box
    box.add("fixme", start=False, restart="no", load_seconds=0.3)
    engine = engine_of(box, "fixme")
    data = {"unit": {"unit": engine.unit, "type": "simple", "timeout_start_usec": "1min 30s", "exec_start_post": []}}
    status, _evidence, fix = CHECKS["readiness_budget"].engine(engine, data, {"margin_s": 60})
    assert status == "warn" and "ExecStartPost=/" in fix, fix
    line = fix.split("ExecStartPost=", 1)[1].split(" (", 1)[0].replace("BUDGET", "20")
    box.dropin("fixme", "60-ready.conf", f"[Service]\nExecStartPost={line}\n")
    box.m.systemctl("start", "--no-block", engine.unit)
    props = shown(box, "fixme", ActiveState="active", journal=lambda: unit_story(box, "fixme"))
    assert props["Result"] == "success", props
    journal_once(
        lambda: gate_lines(box, "fixme"),
        lambda got: any("ready after" in x for x in got),
        lambda: unit_story(box, "fixme"),
    )


# --- 8: `unit fix` says nothing on stderr unless asked (-v 2) ------------------------------------


@pytest.mark.django_db(transaction=True)
def test_unit_fix_is_quiet_on_stderr_unless_verbose(real_box, engine_of):
    """`sparkops unit fix` as an operator runs it: the diff on stdout, nothing on stderr (it printed
    the log's INFO lines there); -v brings them back."""
    from django.conf import settings

    from .test_controls import database_url

    box = real_box
    box.add("quiet", restart="on-failure")
    box.add("loud", restart="on-failure")
    quiet_engine = engine_of(box, "quiet")
    engine_of(box, "loud")
    from dashboard.models import Engine

    # a peer whose unit cannot be read: the observation of the box's units before the fix logs it at INFO
    Engine.objects.create(
        name="peer-unread",
        kind="vllm",
        url="http://127.0.0.1:1",
        host=quiet_engine.host,
        unit="nosuch.service",
        unit_scope="user",
        status="up",
    )
    env = {k: v for k, v in os.environ.items() if k not in ("SPARKOPS_TEST_DB_NAME", "MAINPID")}
    env.update(box.m.env)
    env.update(
        DATABASE_URL=database_url(),
        DJANGO_SETTINGS_MODULE="sparkops.settings",
        SPARKOPS_HOST_NAME=settings.SPARKOPS_HOST_NAME,
        SPARKOPS_SYSTEMCTL="systemctl",
        SPARKOPS_JOURNALCTL=settings.SPARKOPS_JOURNALCTL,
        SPARKOPS_HOST_ROOT="/",
    )

    def run(name, *extra):
        done = subprocess.run(
            [SPARKOPS, "unit", "fix", name, "--check", "restart_always_bounded", "--apply", *extra],
            env=env,
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            check=False,
        )
        box.files.append(box.m.unit_dir / f"{box.unit(name)}.d" / "50-sparkops-restart_always_bounded.conf")
        return done

    quiet = run("quiet")
    assert quiet.returncode == 0 and "50-sparkops-restart_always_bounded.conf" in quiet.stdout, quiet
    assert "daemon-reload: done" in quiet.stdout and quiet.stderr == "", quiet
    loud = run("loud", "-v")
    assert loud.returncode == 0 and "daemon-reload: done" in loud.stdout and "INFO" in loud.stderr, loud


# --- 4. "in the unit" against "in what runs" ------------------------------------------------------


@pytest.mark.django_db
def test_a_fix_applied_to_a_running_unit_is_applied_not_passed_until_the_restart(real_box, engine_of):
    """`unit fix --check compile_caps --apply` on a running engine: the unit's files have the caps,
    its process (/proc/PID/environ) does not. The audit says "applied, takes effect at the next
    restart" with the restart command for compile_caps and running_matches_unit (it passed both at
    once), the observed entry says "in the unit, not yet in what runs", `unit fix` writes nothing
    more; after the restart both pass."""
    from sparkops.changelog.models import Entry

    from .test_controls import proc_environ, unit_engine_with_share
    from .test_unitfix import _audit, on_disk, unit_fix

    box = real_box
    unit_engine_with_share(box, "capsless", 0.2)
    engine = engine_of(box, "capsless")
    assert _audit(engine)["compile_caps"].status == "fail"
    code, out = unit_fix("capsless", "--check", "compile_caps", "--apply")
    for fix in out["fixes"]:
        box.files.append(on_disk(fix["path"]))
    assert code == 0 and out["applied"], out
    pid = box.show("capsless")["MainPID"]
    assert "MAX_JOBS" not in proc_environ(pid)  # what runs has no caps
    found = _audit(engine)
    restart = f"systemctl --user restart {engine.unit}"
    for check in ("compile_caps", "running_matches_unit"):
        result = found[check]
        assert result.status == "applied", (check, result)
        assert "not yet in what runs" in result.evidence and "MAX_JOBS unset" in result.evidence, result.evidence
        assert "takes effect at the next restart" in result.evidence and restart in result.fix, result
    entry = Entry.objects.get(pk=out["entry"]["id"])
    assert "in the unit, not yet in what runs (" in entry.body_md and restart in entry.body_md, entry.body_md
    code, again = unit_fix("capsless", "--check", "compile_caps")
    assert code == 0 and again["fixes"] == [] and again["skipped"][0]["status"] == "applied", again
    # the box's worker: its launch duty audits, its poll puts the count on the engine's card
    from sparkops.live.cards import engine_card_html
    from sparkops.poller.resident import ResidentPoller

    poller = ResidentPoller(engine.host.name, duties={}, flush_interval=0)
    poller.metrics_tick()
    poller.launch_tick()
    poller.metrics_tick(engines=[engine])  # its next poll (not yet due by the clock)
    engine.refresh_from_db()
    card = engine_card_html(engine)
    assert "audit: 2 applied, takes effect at the next restart" in card, (engine.latest or {}).get("audit_applied")

    box.restart("capsless")
    shown(box, "capsless", ActiveState="active", SubState="running")
    assert wait_for(lambda: box.show("capsless")["MainPID"] not in ("0", pid), timeout=WAIT_S)
    box.wait_ready("capsless")
    assert proc_environ(box.show("capsless")["MainPID"])["MAX_JOBS"] == "4"
    after = _audit(engine)
    assert after["compile_caps"].status == "pass" and after["running_matches_unit"].status == "pass", after


# --- 9. the start limit's count, by systemd and by SparkOps --------------------------------------


@pytest.mark.django_db
def test_a_daemon_reload_resets_the_start_limit_and_the_audit_counts_sparkops_own_starts(real_box, engine_of):
    """Restart=always, StartLimitBurst=3 per hour: three starts, a daemon-reload (as `unit fix --apply`
    on another engine does), two more crashes — systemd restarts both (its counter was reset), five
    starts in the hour (the issue's "5 starts passed in 6 min"). SparkOps's start rows count all five,
    and the audit says the bound did not hold."""
    from django.utils import timezone

    from dashboard.models import EngineStart
    from sparkops.collectors.systemd import units_show
    from sparkops.launch.starts import StartTracker

    from .test_unitfix import _audit

    box = real_box
    box.add(
        "loop", restart="always", unit_opts={"restart_sec": 0.1, "start_limit_burst": 3, "start_limit_interval": 3600}
    )
    engine = engine_of(box, "loop")
    tracker = StartTracker()

    def tick(count):
        props = units_show([engine.unit], scope="user")
        if _healthy(engine.url):
            engine.status, engine.last_ok_at = "up", timezone.now()
        else:
            engine.status = "down"
        tracker.track([engine], props, {})
        return EngineStart.objects.filter(engine=engine).count() >= count

    assert wait_for(lambda: tick(1), timeout=WAIT_S, step=0.1)  # its first start (begun before the tracker)

    def crash(count):
        box.fault("loop", "crash")
        assert wait_for(lambda: tick(count), timeout=WAIT_S, step=0.1), box.show("loop")

    crash(2)
    crash(3)  # three starts: StartLimitBurst reached
    box.m.systemctl("daemon-reload")
    crash(4)
    crash(5)
    props = shown(box, "loop", ActiveState="active")
    assert props["NRestarts"] == "4", props  # past StartLimitBurst=3: the reload reset systemd's count
    result = _audit(engine)["restart_always_bounded"]
    assert result.status == "warn" and "SparkOps recorded 5 starts of it in the last 1h" in result.evidence, result
    assert "every daemon-reload resets it" in result.evidence


# --- 2. starts the worker did not see begin -------------------------------------------------------


@pytest.mark.django_db
def test_starts_made_while_the_worker_was_down_are_timed_by_systemd_not_by_its_first_answer(real_box, engine_of):
    """Two units started in the same second, both serving before the worker (its StartTracker) runs;
    one behind the gate, one without. Each gets its start row: the gated one served when systemd
    called it active (its ActiveEnterTimestamp, the gate's ready), not at the worker's first answer;
    the other is kept as not measured. Neither is stored as warm: no compiler seen by a worker that
    was down proves nothing (a gated cold start read as warm skewed the warm class), so both are of
    unknown kind and no cold/warm budget is learned from either."""
    from dashboard.models import EngineStart
    from sparkops.collectors.systemd import units_show
    from sparkops.controls.unitfix_checks import BUDGET_UNMEASURED_S, readiness_budget_s
    from sparkops.launch.starts import StartTracker, parse_timestamp, restart_budget

    from .test_launch import ticker

    box = real_box
    box.add("gated", start=False, load_seconds=0.3)
    wait_ready_post(box, "gated", 30)
    box.add("bare", start=False, load_seconds=0.3)
    box.start_together(["gated", "bare"])
    for name in ("gated", "bare"):
        box.wait_ready(name)
        shown(box, name, ActiveState="active")
    gated, bare = engine_of(box, "gated"), engine_of(box, "bare")
    gated.status, gated.last_ok_at = "down", None  # as stored before the worker went down
    gated.save()
    tracker = StartTracker()  # the worker comes up: both starts are over
    assert wait_for(
        lambda: ticker([gated, bare], tracker) and EngineStart.objects.filter(engine__in=[gated, bare]).count() == 2,
        timeout=WAIT_S,
        step=0.2,
    )
    props = units_show([gated.unit], scope="user")[gated.unit]
    g, b = EngineStart.objects.get(engine=gated), EngineStart.objects.get(engine=bare)
    assert g.gate == "ready" and g.measured, (g.gate, g.gate_line)
    assert g.healthy_at == g.active_at == parse_timestamp(props["ActiveEnterTimestamp"]), (g.healthy_at, props)
    assert g.healthy_at.timestamp() < tracker.since  # not the worker's first answer
    assert not b.measured and b.healthy_at is not None, b.__dict__
    assert g.kind == b.kind == "unknown" and g.compilers_max == 0, (g.kind, b.kind)
    assert restart_budget(bare)["classes"] == {} and restart_budget(gated)["classes"] == {}
    assert readiness_budget_s(bare)[1].startswith("no start of bare measured yet"), readiness_budget_s(bare)
    assert readiness_budget_s(gated)[0] == BUDGET_UNMEASURED_S, readiness_budget_s(gated)
