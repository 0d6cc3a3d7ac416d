"""`sparkops up`'s supervisor (dashboard/stack/children.py): a child marked restart is started again
when it ends (beat exits after minutes without a database; the worker must not stop with it); any
other child's end stops the stack, as before. Real child processes; the pause is made short."""

import io
import sys
import threading

from dashboard.stack import children
from dashboard.stack.children import Child, Supervisor
from tests.waiting import wait_for


def test_a_restartable_child_is_started_again_and_the_others_stay(monkeypatch):
    monkeypatch.setattr(children, "RESTART_FIRST_S", 0.01)
    out = io.StringIO()
    sup = Supervisor(out=out)
    flaky = sup.start(Child("beat", [sys.executable, "-c", "raise SystemExit(3)"], restart=True), {})
    steady = sup.start(Child("worker", [sys.executable, "-c", "import time; time.sleep(60)"]), {})
    first = flaky.pid
    ended = []
    watcher = threading.Thread(target=lambda: ended.append(sup.watch(interval=0.01)))
    watcher.start()
    try:
        assert wait_for(lambda: flaky.restarts >= 2, timeout=30), out.getvalue()
        assert flaky.pid != first
        assert not steady.exited()  # the worker runs on
        assert "beat (pid " in out.getvalue() and "exited with status 3; starting it again in" in out.getvalue()
        assert ended == []  # the stack was not stopped
    finally:
        sup.request_stop()
        watcher.join(10)
        sup.stop_all(grace=2)
    assert ended == [None]


def test_a_child_that_may_not_restart_ends_the_watch():
    sup = Supervisor(out=io.StringIO())
    dead = sup.start(Child("web", [sys.executable, "-c", "raise SystemExit(2)"]), {})
    try:
        assert sup.watch(interval=0.01) is dead
        assert dead.returncode == 2
    finally:
        sup.stop_all(grace=2)
