"""The readiness gate's deadline on a clock the test moves (`sparkops.gate.readiness.wait`'s
`clock=`): a socket that accepts and never answers ends the gate at its budget by that clock, with
the stalled request named, and a main process that dies ends it as a death however much budget is
left. The real-systemd tests run the same gate as a unit's ExecStartPost= (tests/realsystemd);
these say when it ends without reading a wall clock."""

import itertools
import socket
import subprocess
import sys

import pytest

from sparkops.gate import readiness
from sparkops.ports import free_port


class Ticks:
    """A monotonic clock that moves STEP seconds each time it is read: the gate's loop reads it
    every turn, so its deadline passes after a known number of turns whatever the machine's load."""

    def __init__(self, step: float):
        self.step, self.reads, self.now = step, itertools.count(), 0.0

    def __call__(self) -> float:
        self.now = next(self.reads) * self.step
        return self.now


@pytest.fixture(autouse=True)
def _short_turns(monkeypatch):
    """The gate's loop waits up to PID_POLL_S of real time a turn for its probe or the main process;
    at 10 ms the deadline on the test's clock passes long before any request's real timeout."""
    monkeypatch.setattr(readiness, "PID_POLL_S", 0.01)


def test_a_stalled_request_counts_against_the_budget_on_the_gates_clock():
    """The old helper counted its sleeps and added each request's timeout: a stalled socket held it
    for twice its budget. This gate gives up at the first turn past its deadline, the request still
    unanswered (a gate that waited for the request would see it time out, and say so instead)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)  # the kernel completes every connection; nobody ever reads or answers
    said: list[str] = []
    step, budget = 10.0, 60.0  # six turns; the request's own timeout is 5 s of real time
    try:
        outcome = readiness.wait(
            f"http://127.0.0.1:{listener.getsockname()[1]}", "vllm", budget, say=said.append, clock=Ticks(step)
        )
    finally:
        listener.close()
    assert (outcome.code, outcome.gate) == (1, "budget"), outcome
    assert "a request unanswered for" in outcome.line, outcome.line
    assert f"not serving after {budget:.1f} s" in outcome.line, outcome.line  # the first turn at the deadline
    assert budget <= outcome.elapsed_s <= budget + 2 * step, outcome  # read once more to report it


def test_a_dead_main_process_ends_the_gate_with_budget_left():
    """The engine's main process is killed (and reaped) when the gate says its first line, from its
    loop: the gate ends as a death at its next turn or so, with nearly all of its budget left."""
    engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    said: list[str] = []
    clock, killed_at = Ticks(1.0), []

    def say(line):
        said.append(line)
        if engine.returncode is None:
            engine.kill()
            engine.wait()
            killed_at.append(clock.now)

    try:
        outcome = readiness.wait(f"http://127.0.0.1:{free_port()}", "vllm", 600, pid=engine.pid, say=say, clock=clock)
    finally:
        engine.kill()
        engine.wait()
    assert (outcome.code, outcome.gate) == (1, "died"), (outcome, said)
    assert f"main process {engine.pid} is gone" in outcome.line, outcome.line
    assert outcome.elapsed_s - killed_at[0] <= 3 * clock.step, (outcome, killed_at)  # turns, not its budget
