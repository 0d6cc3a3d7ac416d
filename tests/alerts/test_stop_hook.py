"""A unit's own stop told to the box's worker: the ExecStopPost= hook (`sparkops stopped`) sends one
datagram over a real AF_UNIX socket, the worker's StopListener reads it, and a bad, oversize or
foreign datagram is dropped without ending the loop. The poller turns a stop into engine_down with
the cause systemd's own verdict gives, without asking systemd again; a stop by hand is left to the probe."""

import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
from django.conf import settings as django_settings

from dashboard.models import Engine, Host
from simulator.supervisor import REPO_ROOT
from sparkops.alerts.models import AlertEvent
from sparkops.alerts.rules.causes import classify
from sparkops.controls import stopped
from sparkops.poller.resident import ResidentPoller
from sparkops.poller.stopsocket import MAX_DATAGRAM, Stop, StopListener, in_use, unit_at_stop
from tests.waiting import wait_for


@pytest.fixture
def sock_path():
    where = tempfile.mkdtemp(prefix="sps-", dir="/tmp")  # an AF_UNIX path must stay under 108 bytes
    yield os.path.join(where, "stopped.sock")
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def listening(sock_path):
    got: list[Stop] = []
    listener = StopListener(sock_path, got.append).start()
    yield listener, got
    listener.stop()


def raw_send(path, data):
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(data, path)


def test_the_hook_datagram_arrives_with_systemds_verdict(listening):
    listener, got = listening
    env = {"SERVICE_RESULT": "signal", "EXIT_CODE": "killed", "EXIT_STATUS": "KILL", "MAINPID": "4242"}
    assert stopped.send(listener.path, stopped.message("vllm-a.service", env))
    assert wait_for(lambda: len(got) == 1, timeout=10)
    stop = got[0]
    assert (stop.unit, stop.service_result, stop.exit_code, stop.exit_status) == (
        "vllm-a.service",
        "signal",
        "killed",
        "KILL",
    )
    assert stop.status == 9 and stop.main_pid == 4242 and abs(stop.time - time.time()) < 60
    assert os.stat(listener.path).st_mode & 0o777 == 0o600


@pytest.mark.parametrize("module", ["sparkops.controls.stopped", "dashboard.controls.stopped"])
def test_the_hook_run_as_a_unit_runs_it_delivers_from_either_module_path(listening, module):
    """`unit fix` writes `-m sparkops.controls.stopped`; units fixed before the move under sparkops/
    carry `-m dashboard.controls.stopped`, which must still deliver (a silent hook is a late page)."""
    listener, got = listening
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SERVICE_RESULT": "success", "EXIT_CODE": "exited"}
    env["EXIT_STATUS"] = "0"
    done = subprocess.run(
        [sys.executable, "-m", module, "--socket", listener.path, "old.service"],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    assert wait_for(lambda: len(got) == 1, timeout=10)
    assert (got[0].unit, got[0].service_result, got[0].exit_status) == ("old.service", "success", "0")


def test_bad_oversize_and_foreign_datagrams_are_dropped_and_the_loop_goes_on(listening):
    listener, got = listening
    for bad in (b"not json", b"[1, 2]", b'{"unit": 3}', b'{"unit": ""}', b"\xff\xfe", b"[" * 3000):
        raw_send(listener.path, bad)
    raw_send(listener.path, b'{"unit": "x.service", "pad": "' + b"a" * (MAX_DATAGRAM + 10) + b'"}')
    assert stopped.send(listener.path, stopped.message("after.service", {"SERVICE_RESULT": "success"}))
    assert wait_for(lambda: len(got) == 1, timeout=10)
    assert got[0].unit == "after.service"
    assert listener.dropped == 7 and listener.received == 1 and listener.thread.is_alive()


def test_a_handler_that_raises_does_not_end_the_loop(sock_path):
    seen = []

    def handler(stop):
        seen.append(stop.unit)
        raise RuntimeError("boom")

    listener = StopListener(sock_path, handler).start()
    try:
        for unit in ("one.service", "two.service"):
            stopped.send(sock_path, stopped.message(unit, {}))
        assert wait_for(lambda: seen == ["one.service", "two.service"], timeout=10)
        assert listener.thread.is_alive()
    finally:
        listener.stop()
    assert not os.path.exists(sock_path)


def test_a_second_listener_does_not_steal_a_live_socket(listening):
    listener, _ = listening
    assert in_use(listener.path)
    with pytest.raises(OSError, match="another process listens"):
        StopListener(listener.path, lambda stop: None)
    assert in_use(listener.path)


def test_the_hook_exits_0_at_once_with_no_worker_listening(sock_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SERVICE_RESULT": "exit-code", "EXIT_CODE": "exited"}
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "sparkops.controls.stopped", "--socket", sock_path, "x.service"],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=60,
        check=False,
    )
    took = time.monotonic() - began
    assert done.returncode == 0 and done.stdout == b"" and done.stderr == b""
    print(f"the hook ran in {took * 1000:.0f} ms (one Python start) with no worker listening")
    assert stopped.main(["--socket", "/nonexistent/dir/stopped.sock", "x.service"]) == 0
    assert stopped.main([]) == 0


@pytest.mark.parametrize(
    ("result", "code", "status", "restart", "cause"),
    [
        ("success", "exited", "0", "on-failure", "exit0_no_restart"),
        ("signal", "killed", "KILL", "no", "unit_failed"),
        ("signal", "killed", "KILL", "on-failure", "restarting"),
        ("exit-code", "exited", "1", "on-failure", "restarting"),
        ("exit-code", "exited", "1", "on-abnormal", "unit_failed"),
        ("core-dump", "dumped", "SEGV", "on-abort", "restarting"),
        ("success", "exited", "0", "always", "restarting"),
    ],
)
def test_a_stop_is_classified_as_systemd_would_leave_the_unit(result, code, status, restart, cause):
    stop = Stop("u.service", result, code, status, None, time.time())
    unit = unit_at_stop(stop, {"Restart": restart, "NRestarts": 0, "ActiveState": "active", "MainPID": 77})
    assert unit["MainPID"] == 0 and unit["NRestarts"] == 0
    assert classify(unit=unit, reason=stop.describe()).key == cause


@pytest.mark.django_db(transaction=True)
def test_the_poller_pages_a_stop_of_its_engines_unit_only(settings):
    settings.SPARKOPS_EXIT_WATCH = False  # no listener: the stops are handed in directly
    host = Host.objects.create(name=django_settings.SPARKOPS_HOST_NAME)
    engine = Engine.objects.create(  # its unit named as systemctl accepts it, without ".service"
        name="hooked", kind="vllm", url="http://127.0.0.1:9", host=host, unit="hooked", status="up"
    )
    poller = ResidentPoller(host.name, duties={}, liveness_interval=3600)
    poller.engines = [Engine.objects.select_related("host").get(pk=engine.pk)]
    poller.units_seen = {engine.pk: {"Restart": "on-failure", "NRestarts": 0, "ActiveState": "active"}}
    poller.stop_seen(Stop("other.service", "signal", "killed", "KILL", None, time.time()))
    poller.stop_seen(Stop("hooked.service", "success", "killed", "TERM", None, time.time()))  # by hand
    assert not AlertEvent.objects.exists()
    assert Engine.objects.get(pk=engine.pk).status == "up"
    poller.stop_seen(Stop("hooked.service", "success", "exited", "0", None, time.time()))
    event = AlertEvent.objects.get(rule="engine_down")
    assert event.state == "firing" and event.cause == "exit0_no_restart", event.message
    assert event.details["reason"] == "its unit stopped (Result=success, exited 0)"
    assert Engine.objects.get(pk=engine.pk).status == "down"
    # The same death seen again by the pidfd just after adds nothing.
    poller.exit_seen(engine.pk, 4242, "main process")
    assert AlertEvent.objects.count() == 1
    assert AlertEvent.objects.get().details["reason"] == "its unit stopped (Result=success, exited 0)"
