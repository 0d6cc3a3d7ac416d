"""Child-process supervision for `sparkops up`: start, watch, stop them all at once.

Every child runs in a session of its own (Ctrl-C reaches only `up`, which then stops the
children) and dies with `up` even when `up` is killed with SIGKILL (sparkops.lifeline).
Stopping sends SIGTERM to every child's process group at the same time and waits at most
STOP_GRACE_S for them together; what is still running then gets SIGKILL. A child is reaped
only after its group has been swept, so the group id cannot have been reused meanwhile."""

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from sparkops.lifeline import SUPERVISOR_ENV, die_with_parent

# How long the children get to stop on SIGTERM, all together. The worker's warm shutdown
# finishes its running tasks and the poller's tick in progress, then stores what it read: about
# a second, but CI's loaded runner once took past the 3 s this was (the worker SIGKILLed, its last
# readings lost). The units give it 15 s (deploy/systemd), docker 10 s: so does `up`.
STOP_GRACE_S = 10.0
# uvicorn's bound for its open connections (a page's WebSocket is closed at once, not waited for).
WEB_GRACE_S = 2
RESTART_FIRST_S, RESTART_MAX_S = 1.0, 30.0  # a restartable child's pause before it is started again, doubling
RESTART_YOUNG_S = 60.0  # a child that ends sooner than this after its start ended young


@dataclass
class Child:
    name: str
    argv: list
    env: dict = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    returncode: int | None = None  # as Popen's: negative for a signal; known once it has ended
    # Started again when it ends, after a pause that doubles while it keeps ending young, instead of
    # stopping the stack: beat exits when the database has been away for minutes, and the worker,
    # which pages from its spool meanwhile, must not stop with it.
    restart: bool = False
    restarts: int = 0
    started_at: float = 0.0
    base_env: dict = field(default_factory=dict)  # what it was started with, for a restart

    def start(self, base_env: dict[str, str]) -> "Child":
        env = {**base_env, **self.env, SUPERVISOR_ENV: str(os.getpid())}
        self.base_env, self.returncode, self.started_at = base_env, None, time.monotonic()
        self.proc = subprocess.Popen(self.argv, env=env, start_new_session=True, preexec_fn=die_with_parent())  # noqa: PLW1509 (prctl only)
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def exited(self) -> bool:
        """Has it ended? Leaves it unreaped (a zombie) until reap()."""
        if self.proc is None:
            return False
        if self.returncode is None and self.proc.returncode is None:
            try:
                info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:  # already reaped
                return True
            if info is None or info.si_pid == 0:
                return False
            self.returncode = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        return True

    def _started(self) -> subprocess.Popen:
        """Its process; signalling or reaping a child never started is a bug of the caller."""
        if self.proc is None:
            raise RuntimeError(f"{self.name} has not been started")
        return self.proc

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._started().pid, sig)

    def reap(self) -> None:
        """Sweep what is left of its process group, then collect its status."""
        self.signal_group(signal.SIGKILL)
        proc = self._started()
        proc.wait()
        if self.returncode is None:
            self.returncode = proc.returncode


class Output(Protocol):
    """Where the supervisor says what it does: sys.stdout, or a command's self.stdout."""

    def write(self, text: str, /) -> Any: ...
    def flush(self) -> Any: ...


class Supervisor:
    def __init__(self, out: "Output" = sys.stdout) -> None:
        self.children: list[Child] = []
        self.out = out
        self._stop = threading.Event()

    def start(self, child: Child, base_env: dict[str, str]) -> Child:
        if not any(c is child for c in self.children):
            self.children.append(child)
        child.start(base_env)
        self.out.write(f"started {child.name} (pid {child.pid})\n")
        self.out.flush()
        return child

    def request_stop(self, *_: Any) -> None:
        self._stop.set()

    def watch(self, interval: float = 0.5) -> Child | None:
        """Block until asked to stop or a child dies; return the dead child or None. A child
        marked `restart` is started again instead (see `Child.restart`), saying so."""
        due: dict[int, float] = {}  # id(child) -> when its restart is due
        while not self._stop.is_set():
            for child in self.children:
                if not child.exited():
                    continue
                if not child.restart:
                    return child
                now = time.monotonic()
                if id(child) not in due:
                    young = now - child.started_at < RESTART_YOUNG_S
                    child.restarts = child.restarts + 1 if young else 1
                    pause = min(RESTART_MAX_S, RESTART_FIRST_S * 2 ** (child.restarts - 1))
                    due[id(child)] = now + pause
                    self.out.write(
                        f"{child.name} (pid {child.pid}) exited with status {child.returncode}; "
                        f"starting it again in {pause:.0f} s\n"
                    )
                    self.out.flush()
                elif now >= due.pop(id(child)):
                    child.reap()
                    self.start(child, child.base_env)
            self._stop.wait(interval)
        return None

    def stop_all(self, grace: float = STOP_GRACE_S) -> None:
        began = time.monotonic()
        running = [child for child in self.children if not child.exited()]
        for child in running:
            child.signal_group(signal.SIGTERM)
        pending, took = list(running), {}
        while pending and time.monotonic() - began < grace:
            time.sleep(0.05)
            for child in [c for c in pending if c.exited()]:
                took[child.name] = time.monotonic() - began
                pending.remove(child)
        for child in pending:
            child.signal_group(signal.SIGKILL)
        for child in reversed(self.children):
            child.reap()
            if child in pending:
                self.out.write(f"killed {child.name}: still running {grace:.0f} s after SIGTERM\n")
            elif child in running:
                self.out.write(f"stopped {child.name} ({took[child.name]:.1f} s)\n")
            else:
                self.out.write(f"stopped {child.name}\n")
        self.out.flush()
