"""Children that die with their parent.

`sparkops up` runs Redis, uvicorn, the worker, beat and the simulator as children. If `up`
itself is killed with SIGKILL (the OOM killer on a unified-memory box sends exactly that)
it cannot stop them, and orphans would keep the port and poll on. Two guards:

- `die_with_parent()` is a `preexec_fn` that asks the kernel (Linux `PR_SET_PDEATHSIG`) to
  send the child SIGTERM when the thread that started it ends. It survives the child's
  exec, so it covers redis-server and uvicorn, whose code is not ours.
- `watch_parent()` is for our own long-running children (the worker, the simulator): when
  the parent is gone it gives the SIGTERM shutdown a few seconds, then kills the child's
  process group, so a warm shutdown waiting on a long task cannot outlive the stack.
"""

import ctypes
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
# Set by `sparkops up` in its children's environment: the pid of the supervisor they must not outlive.
SUPERVISOR_ENV = "SPARKOPS_SUPERVISOR_PID"

# Resolved here, in the parent: the forked child must not load libraries before it execs.
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A `preexec_fn` for Popen: the child gets SIG when this process's calling thread ends
    (on Linux; elsewhere it does nothing). Start children from a thread that lives as long
    as they should, e.g. the main thread."""
    parent = os.getpid()

    def preexec() -> None:
        if _prctl is not None:
            _prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died between fork and prctl: no signal will come
            os._exit(1)

    return preexec


def _wait_for_exit(pid: int) -> None:
    """Block until process PID has ended, without waking up while it lives (a pidfd where the
    kernel has them, else a check once a second)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        try:
            if os.getppid() == pid:  # opened in time: the pidfd turns readable when it ends
                select.select([fd], [], [])
        finally:
            os.close(fd)
        return
    while os.getppid() == pid:
        time.sleep(1.0)


def watch_parent(grace: float = 3.0) -> threading.Thread | None:
    """When this process was started by `sparkops up` (SPARKOPS_SUPERVISOR_PID names our
    parent), start a daemon thread that waits for the parent to end and, GRACE seconds
    later, kills what is left of this process (its whole process group when it leads one).
    The normal path is the SIGTERM from die_with_parent(); this bounds it. Returns the
    thread, or None when there is no supervisor to watch."""
    try:
        parent = int(os.environ.get(SUPERVISOR_ENV, ""))
    except ValueError:
        return None
    if parent != os.getppid():  # not started by it directly (a grandchild inherits the variable)
        return None

    def watch() -> None:
        _wait_for_exit(parent)
        time.sleep(grace)
        if os.getpgid(0) == os.getpid():
            os.killpg(0, signal.SIGKILL)
        os._exit(1)

    thread = threading.Thread(target=watch, name="sparkops-parent-watch", daemon=True)
    thread.start()
    return thread
