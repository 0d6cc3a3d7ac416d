"""A page is a promise (issue 45), against the real systemd 252 user manager: a resident poller
with every event source on (pidfds, the units' stop hook, the journal follower, a probe every
0.5 s) watches an engine while an operator restarts and stops it by hand. A restart or stop asked
of systemd pages nothing; a crash that systemd restarts is one warning, never a page; a restart
whose new process does not answer within the unit's TimeoutStartSec= is one page, "did not come
back after a restart". Pages are counted as they are made (the outbox's Delivery rows, one per
channel and transition) and as received (a real webhook receiver on 127.0.0.1). No timing
assertion: every wait is for an event, under a generous timeout."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile

import pytest

from dashboard.models import Engine
from sparkops.alerts.models import AlertEvent, Delivery, NotificationChannel
from sparkops.poller import exitwatch
from sparkops.poller.resident import ResidentPoller
from tests.alerts.servers import WebhookReceiver
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not exitwatch.pidfd_supported(), reason="no pidfds on this kernel"),
]
WAIT_S = 90


@contextlib.contextmanager
def _watched(real_box, engine_of, settings, *, hook):
    """(box, engine, poller, receiver): engine "pl" under a Restart=on-failure unit (with the stop
    hook when HOOK), watched by every event source, paging to a real webhook receiver."""
    where = tempfile.mkdtemp(prefix="spl-", dir="/tmp")  # an AF_UNIX path stays under 108 bytes
    settings.SPARKOPS_EXIT_WATCH = True
    settings.SPARKOPS_EXIT_WATCH_PIDFDS = True
    settings.SPARKOPS_EXIT_WATCH_STOP_HOOK = hook
    settings.SPARKOPS_STOP_SOCKET = os.path.join(where, "stopped.sock")
    stop_hook = (
        f"ExecStopPost={sys.executable} -m sparkops.controls.stopped --socket {settings.SPARKOPS_STOP_SOCKET} %n\n"
    )
    real_box.add("pl", restart="on-failure", service=stop_hook if hook else "", unit_opts={"restart_sec": 0.2})
    engine = engine_of(real_box, "pl")
    from sparkops.celery import app

    app.conf.task_always_eager = True  # the outbox's sends run where the page is made, no broker between
    receiver = WebhookReceiver()
    NotificationChannel.objects.create(
        name="hook", kind="webhook", config={"url": receiver.url, "format": "sparkops"}, secret="k3y"
    )
    poller = ResidentPoller(engine.host.name, duties={}, liveness_interval=0.5, flush_interval=0).start()
    try:
        assert wait_for(lambda: poller.exit_watch is not None and poller.exit_watch.pids_of(engine.pk), timeout=WAIT_S)
        assert wait_for(lambda: poller.journal is not None and poller.journal._proc is not None, timeout=WAIT_S)
        # The manager's job signals are read (unitjobs.py): they tell a stop asked for from an exit.
        assert wait_for(lambda: "user" in poller.unit_jobs and poller.unit_jobs["user"].connected, timeout=WAIT_S)
        # The rule has seen the engine up under its first run (which run answered is what tells a restart).
        assert wait_for(lambda: _up(engine) and poller.cycles["probe"] >= 3, timeout=WAIT_S)
        yield real_box, engine, poller, receiver
    finally:
        poller.stop()
        receiver.close()
        app.conf.task_always_eager = False
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def watched_box(real_box, engine_of, settings):
    with _watched(real_box, engine_of, settings, hook=True) as made:
        yield made


@pytest.fixture
def unhooked_box(real_box, engine_of, settings):
    """The same without the stop hook: a unit left inactive is collected at once, and only the
    manager's job signals (or its journal, late) tell a `systemctl stop` from an exit 0."""
    with _watched(real_box, engine_of, settings, hook=False) as made:
        yield made


def _up(engine):
    return Engine.objects.get(pk=engine.pk).status == "up"


def _main_pid(box):
    return int(box.show("pl")["MainPID"])


def _came_back(box, engine, poller, old_pid):
    """The unit runs a new main process, the poller has found the engine up and probed it since."""
    assert wait_for(lambda: _main_pid(box) not in (0, old_pid), timeout=WAIT_S), box.show("pl")
    box.wait_ready("pl", timeout=WAIT_S)
    assert wait_for(lambda: _up(engine), timeout=WAIT_S)
    new = _main_pid(box)
    assert wait_for(lambda: new in poller.exit_watch.pids_of(engine.pk), timeout=WAIT_S)  # re-armed
    seen = poller.cycles["probe"]
    assert wait_for(lambda: poller.cycles["probe"] >= seen + 2, timeout=WAIT_S)


def _received(receiver, engine):
    """What the receiver got about ENGINE (the poller's hand-run scan also watches other programs'
    engines on this box, e.g. a parallel test run's, and pages for them)."""
    return [body for _, body in receiver.accepted() if body.get("engine") == engine.name]


def _pages(engine):
    """Deliveries of ENGINE's critical alerts: what wakes somebody."""
    return Delivery.objects.filter(
        event__engine=engine, event__severity="critical", transition__in=("firing", "renotify")
    )


def test_restarts_and_a_stop_asked_of_systemd_page_nothing(watched_box):
    box, engine, poller, receiver = watched_box
    for _ in range(3):
        old = _main_pid(box)
        box.m.systemctl("restart", box.unit("pl"))
        _came_back(box, engine, poller, old)
    assert poller.exit_watch.exits >= 3  # each old process's exit was seen, and judged
    old = _main_pid(box)
    box.m.systemctl("stop", box.unit("pl"))
    assert wait_for(lambda: Engine.objects.get(pk=engine.pk).status == "down", timeout=WAIT_S)
    seen = poller.cycles["probe"]
    assert wait_for(lambda: poller.cycles["probe"] >= seen + 4, timeout=WAIT_S)  # the probe judged it, again and again
    assert not AlertEvent.objects.filter(rule="engine_down", engine=engine).exists(), list(
        AlertEvent.objects.filter(engine=engine).values_list("cause", "details__reason")
    )
    box.m.systemctl("start", box.unit("pl"))
    _came_back(box, engine, poller, old)
    assert not _pages(engine).exists()
    assert not AlertEvent.objects.filter(rule="engine_down", engine=engine).exists()
    assert _received(receiver, engine) == []


def test_without_the_stop_hook_a_restart_and_a_stop_page_nothing(unhooked_box):
    box, engine, poller, receiver = unhooked_box
    old = _main_pid(box)
    box.m.systemctl("restart", box.unit("pl"))
    _came_back(box, engine, poller, old)
    box.m.systemctl("stop", box.unit("pl"))
    assert wait_for(lambda: Engine.objects.get(pk=engine.pk).status == "down", timeout=WAIT_S)
    seen = poller.cycles["probe"]
    assert wait_for(lambda: poller.cycles["probe"] >= seen + 4, timeout=WAIT_S)
    assert poller.exit_watch.exits >= 2  # both exits were seen by the pidfd, and judged
    assert not AlertEvent.objects.filter(rule="engine_down", engine=engine).exists(), list(
        AlertEvent.objects.filter(engine=engine).values_list("cause", "details__reason")
    )
    assert _received(receiver, engine) == []


def test_a_crash_systemd_restarts_is_one_warning_with_its_cause(watched_box):
    box, engine, poller, _receiver = watched_box
    old = _main_pid(box)
    os.kill(old, signal.SIGKILL)
    assert wait_for(
        lambda: AlertEvent.objects.filter(rule="engine_down", engine=engine, state="firing").exists(), timeout=WAIT_S
    )
    event = AlertEvent.objects.get(rule="engine_down", engine=engine)
    assert (event.severity, event.cause) == ("warning", "crashed_restarting"), event.message
    assert "systemd is restarting it" in event.message
    _came_back(box, engine, poller, old)
    assert wait_for(lambda: AlertEvent.objects.get(pk=event.pk).state == "resolved", timeout=WAIT_S)
    assert not _pages(engine).exists()
    warnings = Delivery.objects.filter(event=event, transition="firing")
    assert warnings.count() == 1  # one notification (at warning severity) to the one channel


@pytest.mark.parametrize("asked_by", ["a shell", "the Restart button"])
def test_a_restart_that_does_not_come_back_pages_once(watched_box, asked_by, settings, admin_user):
    """Paged once, as what it is; the page names who asked where SparkOps asked (the Restart button
    runs systemctl on this worker), and no one for a shell's systemctl, which only systemd knows."""
    from dashboard.unit_actions import unit_restart

    box, engine, poller, receiver = watched_box
    # The next start loads for ever; systemd gives a start 2 s (a Type=simple unit is active at once,
    # so the budget is SparkOps's to keep: TimeoutStartSec=).
    slow = box.engine_argv("pl", load_seconds=900)
    box.dropin("pl", "70-slow.conf", f"[Service]\nExecStart=\nExecStart={slow}\nTimeoutStartSec=2\n")
    old = _main_pid(box)
    if asked_by == "a shell":
        box.m.systemctl("restart", box.unit("pl"))
    else:
        settings.SPARKOPS_UNIT_ACTIONS = True
        unit_restart(engine.pk, None, admin_user.pk)
    assert wait_for(lambda: _main_pid(box) not in (0, old), timeout=WAIT_S)
    assert wait_for(
        lambda: AlertEvent.objects.filter(rule="engine_down", engine=engine, state="firing").exists(), timeout=WAIT_S
    ), list(AlertEvent.objects.filter(engine=engine).values("state", "cause", "message"))
    event = AlertEvent.objects.get(rule="engine_down", engine=engine)
    assert (event.severity, event.cause) == ("critical", "no_return_after_restart"), event.message
    who = "systemctl restart, " if asked_by == "a shell" else "systemctl restart by ada (the Restart button), "
    assert f"did not come back after a restart ({who}" in event.message, event.message
    assert "readiness lied" not in event.message
    seen = poller.cycles["probe"]
    assert wait_for(lambda: poller.cycles["probe"] >= seen + 6, timeout=WAIT_S)  # judged again, and again
    assert _pages(engine).count() == 1
    assert wait_for(lambda: len(_received(receiver, engine)) == 1, timeout=WAIT_S), receiver.requests
