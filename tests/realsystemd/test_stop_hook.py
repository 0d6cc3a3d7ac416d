"""A death told by the unit's own stop, against the real systemd 252 user manager: the unit's
ExecStopPost= runs the hook (`python -m sparkops.controls.stopped --socket PATH %n`), which hands
the resident poller's stop listener systemd's $SERVICE_RESULT / $EXIT_CODE / $EXIT_STATUS. With the
pidfds off and the probe never due (a 3600 s liveness interval: it probes once at start), the death
is paged through the hook alone, with the cause systemd's verdict gives; with both sources on, the
death is one alert though both report it."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile

import pytest

from dashboard.models import Engine
from sparkops.alerts.models import AlertEvent
from sparkops.poller import exitwatch
from sparkops.poller.exits import STOP_TOLD
from sparkops.poller.resident import ResidentPoller
from tests.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def stop_socket(settings):
    where = tempfile.mkdtemp(prefix="sps-", dir="/tmp")  # an AF_UNIX path must stay under 108 bytes
    settings.SPARKOPS_EXIT_WATCH = True
    settings.SPARKOPS_EXIT_WATCH_STOP_HOOK = True
    settings.SPARKOPS_STOP_SOCKET = os.path.join(where, "stopped.sock")
    yield settings.SPARKOPS_STOP_SOCKET
    shutil.rmtree(where, ignore_errors=True)


def hooked(real_box, name, path, restart):
    hook = f"ExecStopPost={sys.executable} -m sparkops.controls.stopped --socket {path} %n\n"
    real_box.add(name, restart=restart, service=hook)


def running_poller(engine):
    poller = ResidentPoller(engine.host.name, duties={}, liveness_interval=3600, flush_interval=0).start()
    assert poller.stops is not None, "the stop listener did not start"
    assert wait_for(lambda: engine.pk in poller.units_seen, timeout=60)  # a metrics tick read its unit
    assert wait_for(lambda: poller.cycles["probe"] >= 1, timeout=60)
    return poller


def test_a_death_is_paged_through_the_stop_hook_alone(real_box, engine_of, stop_socket, settings):
    settings.SPARKOPS_EXIT_WATCH_PIDFDS = False
    hooked(real_box, "sh-kill", stop_socket, restart="no")
    real_box.add("sh-bare", restart="no")
    engine, bare = engine_of(real_box, "sh-kill"), engine_of(real_box, "sh-bare")
    poller = running_poller(engine)
    try:
        assert poller.exit_watch is None  # no pidfd source

        # The card says how each death will be seen: the unit's ExecStopPost= (read in the tick's systemctl
        # show) where it has the hook, the probe where it has none.
        def watched(e):
            return (Engine.objects.get(pk=e.pk).latest or {}).get("watched")

        assert wait_for(lambda: watched(engine) == STOP_TOLD and watched(bare) == "probe every 3600 s"), (
            watched(engine),
            watched(bare),
        )
        probes = poller.cycles["probe"]
        os.kill(int(real_box.show("sh-kill")["MainPID"]), signal.SIGKILL)
        assert wait_for(lambda: AlertEvent.objects.filter(rule="engine_down", state="firing").exists(), timeout=60)
        event = AlertEvent.objects.get(rule="engine_down")
        assert event.cause == "unit_failed", event.message
        assert "Result=signal" in event.message
        assert event.details["reason"] == "its unit stopped (Result=signal, killed KILL)"  # the hook's finding
        assert poller.cycles["probe"] == probes  # the probe never ran meanwhile
        assert poller.stops.received == 1
    finally:
        poller.stop()


def test_an_exit0_under_restart_on_failure_is_paged_through_the_hook(real_box, engine_of, stop_socket, settings):
    settings.SPARKOPS_EXIT_WATCH_PIDFDS = False
    hooked(real_box, "sh-exit0", stop_socket, restart="on-failure")
    engine = engine_of(real_box, "sh-exit0")
    poller = running_poller(engine)
    try:
        real_box.fault("sh-exit0", "exit0")
        assert wait_for(lambda: AlertEvent.objects.filter(rule="engine_down", state="firing").exists(), timeout=60)
        event = AlertEvent.objects.get(rule="engine_down")
        assert event.cause == "exit0_no_restart", event.message
        assert event.details["reason"] == "its unit stopped (Result=success, exited 0)"
        assert poller.cycles["probe"] == 1
    finally:
        poller.stop()


@pytest.mark.skipif(not exitwatch.pidfd_supported(), reason="no pidfds on this kernel")
def test_both_sources_see_the_death_and_it_is_one_alert(real_box, engine_of, stop_socket, settings):
    settings.SPARKOPS_EXIT_WATCH_PIDFDS = True
    hooked(real_box, "sh-both", stop_socket, restart="no")
    engine = engine_of(real_box, "sh-both")
    poller = running_poller(engine)
    try:
        assert wait_for(lambda: poller.exit_watch is not None and poller.exit_watch.pids_of(engine.pk), timeout=60)
        os.kill(int(real_box.show("sh-both")["MainPID"]), signal.SIGKILL)
        assert wait_for(lambda: AlertEvent.objects.filter(rule="engine_down", state="firing").exists(), timeout=60)
        # Both sources report it: the pidfd at the exit, the hook once systemd ran ExecStopPost=.
        assert wait_for(lambda: poller.stops.handled == 1 and poller.exit_watch.exits >= 1, timeout=60)
        assert wait_for(lambda: poller.deaths_seen.get(engine.pk), timeout=30)
        assert AlertEvent.objects.filter(rule="engine_down").count() == 1
        event = AlertEvent.objects.get(rule="engine_down")
        assert event.cause == "unit_failed", event.message
        assert event.notes.filter(kind="firing").count() == 1
    finally:
        poller.stop()
