"""A death seen when it happens (issue 28): the resident poller's exit watcher holds a pidfd of a
real engine process; killing it raises engine_down with no probe run, and the probe that sees the
same death afterwards adds nothing: one alert, one page. Real processes, a real webhook receiver
on 127.0.0.1, Celery eager; no timing assertions (every wait is on an event)."""

import os
import signal
import socket
import subprocess
import sys

import psutil
import pytest
from django.conf import settings as django_settings

from dashboard.models import Engine, Host
from simulator.supervisor import REPO_ROOT
from sparkops.alerts.models import AlertEvent, Delivery, NotificationChannel
from sparkops.poller import exitwatch
from sparkops.poller.resident import ResidentPoller
from sparkops.ports import free_port
from tests.waiting import serves, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not exitwatch.pidfd_supported(), reason="no pidfds on this kernel"),
]


@pytest.fixture
def eager():
    from sparkops.celery import app

    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


def _engine_at(where):
    """(process, URL): a simulated vLLM engine, a real process serving on WHERE (not under any unit),
    killed when the caller's fixture ends."""
    port = free_port()
    argv = [sys.executable, "-m", "simulator.engine", "--kind", "vllm", "--name", "pidfd"]
    argv += ["--port", str(port), "--host", where]
    proc = subprocess.Popen(
        argv,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield proc, f"http://{where}:{port}"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.fixture
def engine_proc():
    """A simulated vLLM engine, a real process serving on 127.0.0.1 (not under any unit)."""
    yield from _engine_at("127.0.0.1")


@pytest.fixture
def armed(engine_proc, receiver, settings):
    """The engine's process watched through a pidfd by a poller whose probe never runs."""
    settings.SPARKOPS_EXIT_WATCH = True
    proc, url = engine_proc
    host = Host.objects.create(name=django_settings.SPARKOPS_HOST_NAME)
    engine = Engine.objects.create(name="pidfd-engine", kind="vllm", url=url, host=host, status="up")
    NotificationChannel.objects.create(
        name="hook", kind="webhook", config={"url": receiver.url, "format": "sparkops"}, secret="k3y"
    )
    # The probe disabled: its clock never comes due, and no probe thread runs at all here.
    poller = ResidentPoller(host.name, duties={}, liveness_interval=3600)
    poller.engines = [Engine.objects.select_related("host").get(pk=engine.pk)]
    poller._start_exit_watch()
    poller.exit_watch.watch({engine.pk: proc.pid})
    assert wait_for(lambda: poller.exit_watch.pids_of(engine.pk) == [proc.pid]), "the pidfd was never armed"
    yield engine, proc, poller
    poller.stop()


@pytest.fixture
def watched(armed, eager):
    return armed


def firing_pages(receiver):
    return [body for _, body in receiver.accepted() if body.get("transition") == "firing"]


def test_a_death_is_seen_through_the_pidfd_alone(watched, receiver):
    engine, proc, poller = watched
    proc.send_signal(signal.SIGKILL)
    assert wait_for(lambda: AlertEvent.objects.filter(rule="engine_down", state="firing").exists(), timeout=30)
    event = AlertEvent.objects.get(rule="engine_down")
    assert event.cause == "process_gone", event.message
    assert f"pid {proc.pid}" in event.message and "exited" in event.message
    assert poller.cycles["probe"] == 0  # no probe ran: the kernel said so
    assert Engine.objects.get(pk=engine.pk).status == "down"
    assert wait_for(lambda: len(firing_pages(receiver)) == 1, timeout=30)
    assert poller.exit_watch.pids_of(engine.pk) == []  # let go: the next tick re-arms a new main pid


def test_the_probe_seeing_the_same_death_adds_nothing(watched, receiver):
    _engine, proc, poller = watched
    proc.send_signal(signal.SIGKILL)
    assert wait_for(lambda: AlertEvent.objects.filter(rule="engine_down", state="firing").exists(), timeout=30)
    assert wait_for(lambda: len(firing_pages(receiver)) == 1, timeout=30)
    for _ in range(2):  # the backstop probe confirms (connection refused), twice
        findings = poller.probe_tick()
        assert [f.status for f in findings] == ["down"]
    assert AlertEvent.objects.filter(rule="engine_down").count() == 1
    assert Delivery.objects.filter(transition="firing").count() == 1
    assert len(firing_pages(receiver)) == 1


def test_a_pid_already_gone_is_not_armed_and_a_new_one_is(watched):
    engine, proc, poller = watched
    proc.send_signal(signal.SIGKILL)
    assert wait_for(lambda: poller.exit_watch.exits == 1, timeout=30)
    proc.wait()
    poller.exit_watch.watch({engine.pk: proc.pid})  # a stale MainPID: nothing to watch
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        poller.exit_watch.watch({engine.pk: other.pid})  # the unit's new main process
        assert wait_for(lambda: poller.exit_watch.pids_of(engine.pk) == [other.pid])
        other.stdin.close()
        assert wait_for(lambda: poller.exit_watch.exits == 2, timeout=30)
    finally:
        other.kill()
        other.wait()


def test_an_engine_core_child_dying_pages_while_the_api_server_runs(watched, receiver):
    """vLLM's EngineCore (a child titled VLLM::EngineCore) dies seconds before its API server exits 0."""
    engine, _proc, poller = watched
    api = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; subprocess.Popen(['VLLM::EngineCore', '1000'], executable='/bin/sleep'); "
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
    )
    try:
        poller.exit_watch.watch({engine.pk: api.pid})
        assert wait_for(lambda: len(poller.exit_watch.pids_of(engine.pk)) == 2, timeout=30)
        core = next(pid for pid in poller.exit_watch.pids_of(engine.pk) if pid != api.pid)
        os.kill(core, signal.SIGKILL)
        assert wait_for(lambda: AlertEvent.objects.filter(rule="engine_down", state="firing").exists(), timeout=30)
        event = AlertEvent.objects.get(rule="engine_down")
        assert (
            "engine core VLLM::EngineCore" in event.details["reason"] and "API server runs" in event.details["reason"]
        )
        assert api.poll() is None  # paged while the API server still runs
        assert poller.exit_watch.pids_of(engine.pk) == [api.pid]
    finally:
        api.kill()
        api.wait()


def test_the_card_says_how_the_engine_is_watched():
    from sparkops.live.cards import engine_card_html

    host = Host.objects.create(name="card-box")
    watched = Engine.objects.create(
        name="watched", kind="vllm", url="http://127.0.0.1:9", host=host, latest={"watched": "exit seen at once"}
    )
    probed = Engine.objects.create(
        name="probed", kind="vllm", url="http://127.0.0.1:8", host=host, latest={"watched": "probe every 1 s"}
    )
    hooked = Engine.objects.create(
        name="hooked", kind="vllm", url="http://127.0.0.1:7", host=host, latest={"watched": "unit's stop told at once"}
    )
    assert '<dd data-field="watched">exit seen at once</dd>' in engine_card_html(watched)
    assert '<dd data-field="watched">probe every 1 s</dd>' in engine_card_html(probed)
    assert '<dd data-field="watched">unit&#x27;s stop told at once</dd>' in engine_card_html(hooked)


def test_the_page_is_sent_from_the_worker_without_a_broker_hop(armed, receiver):
    """No Celery worker consumes the queue here (not eager either): the `alerts.deliver` task the
    outbox queues is never run, so only the exit path's own send can deliver the page."""
    _engine, proc, _poller = armed
    proc.send_signal(signal.SIGKILL)
    assert wait_for(lambda: len(firing_pages(receiver)) == 1, timeout=30)
    # The receiver has the POST before the sender, on its answer, marks the row sent.
    assert wait_for(lambda: Delivery.objects.get(transition="firing").status == "sent", timeout=30)
    assert firing_pages(receiver)[0]["subject"] == "pidfd-engine"


def test_a_settling_unit_holds_up_no_probe_and_the_probe_leaves_that_death_to_it(watched, receiver):
    """While an exit path waits for the dead engine's unit to settle (up to EXIT_SETTLE_S), the
    probe's lock is free: the box's other engines are probed, and the probe does not page that
    death itself with an unsettled unit; the exit path then pages it once, with what it read."""
    import threading

    from sparkops.collectors.unitnow import UnitNow

    alive, _proc, poller = watched
    assert wait_for(lambda: serves(alive.url), timeout=60), "the live engine never served"
    dead = Engine.objects.create(name="settling", kind="vllm", url="http://127.0.0.1:9", host=alive.host, status="up")
    poller.engines = [*poller.engines, Engine.objects.select_related("host").get(pk=dead.pk)]
    reading, release = threading.Event(), threading.Event()
    settled = {"ActiveState": "failed", "SubState": "failed", "Result": "signal", "ExecMainCode": 2}

    def slow_unit_read(engine):  # systemd still deactivating the unit: the path waits
        reading.set()
        assert release.wait(60)
        return UnitNow({**settled, "ExecMainStatus": 9, "Restart": "no"})

    exit_path = threading.Thread(
        target=poller._death_found, args=(poller.engines[-1], "its unit stopped (test)", "stop hook", slow_unit_read)
    )
    exit_path.start()
    try:
        assert reading.wait(30)
        assert poller._liveness_lock.acquire(timeout=5), "the unit's settling holds the probe's lock"
        poller._liveness_lock.release()
        findings = {f.engine.name: f.status for f in poller.probe_tick()}  # not held up by the settling unit
        assert findings == {alive.name: "up", dead.name: "down"}, findings
        assert not AlertEvent.objects.filter(rule="engine_down").exists()  # left to the exit path
    finally:
        release.set()
        exit_path.join(60)
    event = AlertEvent.objects.get(rule="engine_down", state="firing")
    assert event.details["reason"] == "its unit stopped (test)" and event.cause == "unit_failed", event.message
    assert "Result=signal" in event.message
    poller.probe_tick()  # the probe confirms afterwards: still one alert
    assert AlertEvent.objects.filter(rule="engine_down").count() == 1


def _lan_address():
    """One of this box's own non-loopback IPv4 addresses, or None."""
    found = [
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    ]
    return found[0] if found else None


@pytest.fixture(params=["loopback", "lan"])
def engine_proc_at(request):
    """A simulated vLLM engine (no unit) and its URL by a loopback address, or by this box's own LAN
    address as a fleet names an engine (so the centre can reach it too)."""
    where = "127.0.0.1" if request.param == "loopback" else _lan_address()
    if where is None:
        pytest.skip("this box has no address but loopback")
    yield from _engine_at(where)


def test_an_engine_without_a_unit_is_watched_through_its_ports_owner(engine_proc_at, receiver, settings, eager):
    """Issue 45 item 7: a local engine added with only its URL is watched by a pidfd on the process
    that owns its listening port, found by the metrics tick (no unit, no MainPID to read), whether
    its URL names a loopback address or one of the box's own (issue 48: a fleet's engines)."""
    settings.SPARKOPS_EXIT_WATCH = True
    proc, url = engine_proc_at
    assert wait_for(lambda: serves(url), timeout=30)
    host = Host.objects.create(name=django_settings.SPARKOPS_HOST_NAME)
    engine = Engine.objects.create(name="portowner", kind="vllm", url=url, host=host, status="up")
    NotificationChannel.objects.create(
        name="hook", kind="webhook", config={"url": receiver.url, "format": "sparkops"}, secret="k3y"
    )
    poller = ResidentPoller(host.name, duties={}, liveness_interval=3600, flush_interval=0).start()
    try:
        assert wait_for(lambda: poller.exit_watch is not None and poller.exit_watch.pids_of(engine.pk), timeout=60)
        assert poller.exit_watch.pids_of(engine.pk) == [proc.pid]  # the port's owner, not a guess
        assert wait_for(lambda: poller.cycles["probe"] >= 1, timeout=60)
        probes = poller.cycles["probe"]
        proc.send_signal(signal.SIGKILL)
        assert wait_for(
            lambda: AlertEvent.objects.filter(rule="engine_down", engine=engine, state="firing").exists(), timeout=30
        )
        event = AlertEvent.objects.get(rule="engine_down", engine=engine)
        assert event.cause == "process_gone" and f"pid {proc.pid}" in event.message, event.message
        assert poller.cycles["probe"] == probes  # the kernel said so; no probe ran
        assert wait_for(lambda: len(firing_pages(receiver)) == 1, timeout=30)
    finally:
        poller.stop()
