"""sparkops.lifeline: children that die with a parent killed by SIGKILL (real processes)."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

from simulator.client import Simulation

REPO = Path(__file__).resolve().parents[1]


def _gone(pid, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def _parent_of(child_code, *, env=None):
    """A parent process that starts CHILD_CODE the way `sparkops up` does and prints its pid."""
    parent = textwrap.dedent(f"""
        import os, subprocess, sys, time
        from sparkops.lifeline import SUPERVISOR_ENV, die_with_parent
        env = {{**os.environ, SUPERVISOR_ENV: str(os.getpid())}}
        child = subprocess.Popen([sys.executable, "-c", {child_code!r}], env=env, start_new_session=True,
                                 preexec_fn=die_with_parent())
        print(child.pid, flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", parent], cwd=REPO, stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}
    )
    child_pid = int(proc.stdout.readline())
    return proc, child_pid


def _kill(proc, child_pid):
    proc.kill()
    proc.wait()
    with contextlib.suppress(ProcessLookupError):
        os.kill(child_pid, signal.SIGKILL)


def test_a_child_gets_sigterm_when_its_parent_is_sigkilled():
    proc, child = _parent_of("import time; print('up', flush=True); time.sleep(60)")
    try:
        assert proc.stdout.readline() == "up\n"  # the child runs (it shares the parent's stdout)
        assert not _gone(child, 0.1)
        proc.kill()
        assert _gone(child, 3.0), "the child outlived its SIGKILLed parent"
    finally:
        _kill(proc, child)


def test_a_child_that_ignores_sigterm_is_ended_by_its_parent_watch():
    # What the worker does under `up`: a warm shutdown may wait on a running task; the watch bounds it.
    code = (
        "import signal, time, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "from sparkops.lifeline import watch_parent; assert watch_parent(grace=0.5); "
        "print('watching', flush=True); time.sleep(60)"
    )
    proc, child = _parent_of(code, env={"PYTHONPATH": str(REPO)})
    try:
        assert proc.stdout.readline() == "watching\n"  # the child is up and watching (it shares the parent's stdout)
        assert not _gone(child, 0.1)
        began = time.monotonic()
        proc.kill()
        assert _gone(child, 5.0), "the child outlived its parent's watch"
        assert time.monotonic() - began >= 0.4  # it had its grace first
    finally:
        _kill(proc, child)


def test_watch_parent_does_nothing_without_a_supervisor(monkeypatch):
    from sparkops.lifeline import SUPERVISOR_ENV, watch_parent

    monkeypatch.delenv(SUPERVISOR_ENV, raising=False)
    assert watch_parent() is None
    monkeypatch.setenv(SUPERVISOR_ENV, str(os.getppid() + 1))  # not our parent: a grandchild inherited it
    assert watch_parent() is None


def test_a_sigkilled_simulator_leaves_no_engine(tmp_path):
    with Simulation(engines=["vllm:lone-vllm"], state_dir=tmp_path) as sim:
        engine_pid = int(sim.show("lone-vllm")["MainPID"])
        assert engine_pid and not _gone(engine_pid, 0.1)
        sim.proc.kill()
        sim.proc.wait()
        gone = _gone(engine_pid, 3.0)
        if not gone:
            os.kill(engine_pid, signal.SIGKILL)
        assert gone, "the simulated engine outlived its SIGKILLed supervisor"
