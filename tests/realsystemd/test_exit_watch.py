"""A death seen when it happens, against the real systemd 252 user manager (issue 28): a running
resident poller whose probe never comes due (a 3600 s liveness interval: it probes once at start)
arms a pidfd on the unit's MainPID from its own `systemctl --user show`; the engine dies and
engine_down fires with the cause the unit gives, the probe having run only that first time. The
journal follower (`journalctl -f` through the harness's journal) carries the CUDA line the engine
logged before it exited, into the alert's message."""

from __future__ import annotations

import os
import signal

import pytest

from dashboard.models import Engine
from sparkops.alerts.models import AlertEvent
from sparkops.poller import exitwatch
from sparkops.poller.exits import EXIT_SEEN
from sparkops.poller.resident import ResidentPoller
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not exitwatch.pidfd_supported(), reason="no pidfds on this kernel"),
]


def running_poller(engine):
    poller = ResidentPoller(engine.host.name, duties={}, liveness_interval=3600, flush_interval=0).start()
    assert wait_for(lambda: poller.exit_watch is not None and poller.exit_watch.pids_of(engine.pk), timeout=60)
    # The probe at start counts once it has finished: a test that compares the count later reads it after that.
    assert wait_for(lambda: poller.cycles["probe"] >= 1, timeout=60)
    return poller


def test_a_unit_engine_killed_is_paged_from_its_pidfd_with_the_units_cause(real_box, engine_of, settings):
    settings.SPARKOPS_EXIT_WATCH = True
    real_box.add("xw-kill", restart="no")
    engine = engine_of(real_box, "xw-kill")
    poller = running_poller(engine)
    try:
        main = int(real_box.show("xw-kill")["MainPID"])
        assert poller.exit_watch.pids_of(engine.pk)[0] == main
        assert wait_for(lambda: (Engine.objects.get(pk=engine.pk).latest or {}).get("watched") == EXIT_SEEN)
        probes = poller.cycles["probe"]
        os.kill(main, signal.SIGKILL)
        assert wait_for(lambda: AlertEvent.objects.filter(rule="engine_down", state="firing").exists(), timeout=60)
        event = AlertEvent.objects.get(rule="engine_down")
        assert event.cause == "unit_failed", event.message  # systemd's word, read once it had settled
        assert "Result=signal" in event.message
        assert event.details["reason"] == f"its main process (pid {main}) exited"  # the pidfd's finding
        assert poller.cycles["probe"] == probes  # the probe never ran meanwhile
        assert AlertEvent.objects.filter(rule="engine_down").count() == 1
    finally:
        poller.stop()


def test_an_exit0_death_carries_the_cuda_line_the_journal_follower_held(real_box, engine_of, settings):
    settings.SPARKOPS_EXIT_WATCH = True
    real_box.add("xw-exit0", exit_delay=0.3)
    engine = engine_of(real_box, "xw-exit0")
    poller = running_poller(engine)
    try:
        assert wait_for(lambda: poller.journal._proc is not None, timeout=60)
        real_box.fault("xw-exit0", "exit0")
        assert wait_for(lambda: AlertEvent.objects.filter(rule="engine_down", state="firing").exists(), timeout=60)
        event = AlertEvent.objects.get(rule="engine_down")
        assert event.cause == "exit0_no_restart", event.message
        assert "illegal instruction" in event.message
        assert event.details["reason"].startswith("its main process (pid ")  # the pidfd's finding
        assert poller.cycles["probe"] == 1  # the one at start, when the engine was up
        assert "illegal instruction" in poller.journal.cause(real_box.unit("xw-exit0"))[0]
    finally:
        poller.stop()
