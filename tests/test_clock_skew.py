"""A worker's clock does not decide what others believe (issue 31, item 2).

The process's clock is shifted in the test (django.utils.timezone.now, which everything here
reads "now" from: a libfaketime of this process), the database's is not. Times that other
processes compare — a host's last report, the collector-stale check, /healthz, alert and
delivery stamps — come from the database; a worker off by more than SPARKOPS_CLOCK_SKEW_MAX_S
says so (its host's reading, the clock_skew rule, /healthz)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.clock import db_now
from dashboard.models import Host
from dashboard.samples.store import SeriesIds
from sparkops.alerts.evaluate import evaluate
from sparkops.alerts.models import AlertEvent, Delivery
from sparkops.poller.fetch import HostCollected
from sparkops.poller.pending import PendingWrites

pytestmark = pytest.mark.django_db

HOUR = 3600.0


@pytest.fixture
def shift(monkeypatch):
    """shift(S): this process's clock reads S seconds ahead of the real one (negative: behind)."""
    real = timezone.now

    def to(seconds):
        monkeypatch.setattr(timezone, "now", lambda: real() + timedelta(seconds=seconds))

    yield to
    monkeypatch.setattr(timezone, "now", real)


def _report(host):
    """What a worker's resident poller does with its host reading: hold it, then store it."""
    pending = PendingWrites(SeriesIds())
    pending.add_host(host, HostCollected(timezone.now(), {"host": {}}, {}, {}, {}))
    pending.flush()


def _open(rule, subject):
    return AlertEvent.objects.filter(rule=rule, subject=subject, state__in=AlertEvent.OPEN_STATES).first()


def test_a_worker_an_hour_ahead_stores_its_report_at_the_databases_time_and_says_it_is_off(fleet, shift):
    host = fleet["host"]
    shift(HOUR)
    _report(host)
    host.refresh_from_db()
    assert abs((host.last_report_at - db_now()).total_seconds()) < 5, host.last_report_at
    assert host.latest["clock_offset_s"] == pytest.approx(HOUR, abs=5)
    evaluate("host_polled", host=host, reading=host.latest)
    skew = _open("clock_skew", f"{host.name}/clock")
    assert skew is not None and skew.state == "firing" and "ahead of the database" in skew.message


def test_a_worker_on_time_raises_no_clock_finding(fleet):
    host = fleet["host"]
    _report(host)
    host.refresh_from_db()
    assert abs(host.latest["clock_offset_s"]) < 2
    evaluate("host_polled", host=host, reading=host.latest)
    assert _open("clock_skew", f"{host.name}/clock") is None


def test_a_dead_worker_is_paged_by_a_leader_ten_minutes_behind(fleet, shift):
    """Its worker last reported 60 s ago (database time): dead. The leader's clock is 10 min
    behind; it must still page, and the alert's times are the database's."""
    host = fleet["host"]
    Host.objects.filter(pk=host.pk).update(last_report_at=db_now() - timedelta(seconds=60))
    shift(-600)
    evaluate("beat")
    stale = _open("collector_stale", f"{host.name}/collector")
    assert stale is not None and stale.state == "firing"
    assert abs((stale.started_at - db_now()).total_seconds()) < 5
    assert Delivery.objects.filter(event=stale).exists()
    for delivery in Delivery.objects.filter(event=stale):
        assert abs((delivery.next_attempt_at - db_now()).total_seconds()) < 5  # due now, not in 10 min


def test_a_leader_ten_minutes_behind_does_not_resolve_a_live_alert(fleet, shift):
    host = fleet["host"]
    Host.objects.filter(pk=host.pk).update(last_report_at=db_now() - timedelta(seconds=60))
    evaluate("beat")
    assert _open("collector_stale", f"{host.name}/collector") is not None
    shift(-600)
    evaluate("beat")  # its own clock would call the 60 s old report 9 minutes in the future: fresh
    stale = _open("collector_stale", f"{host.name}/collector")
    assert stale is not None, "a leader's slow clock resolved a dead worker's alert"


def test_healthz_on_a_web_ten_minutes_behind_still_lists_a_dead_worker(client, fleet, shift):
    host = fleet["host"]
    Host.objects.filter(pk=host.pk).update(last_report_at=db_now() - timedelta(seconds=120))
    shift(-600)
    body = client.get("/healthz").json()
    assert any(p.startswith(f"host {host.name}: its worker has not reported for") for p in body["problems"]), body


def test_healthz_says_which_workers_clock_is_off(client, fleet):
    host = fleet["host"]
    now = db_now()
    Host.objects.filter(pk=host.pk).update(last_report_at=now, latest={"host": {}, "clock_offset_s": HOUR})
    from dashboard.models import Engine

    Engine.objects.filter(pk=fleet["vllm"].pk).update(last_poll_at=now)
    response = client.get("/healthz")
    assert response.status_code == 503
    problems = " ".join(response.json()["problems"])
    assert f"the clock of host {host.name} is 3600.0 s ahead of the database's" in problems


def _fire_stale(host):
    """A dead worker's collector_stale alert (critical), fired on the right clock."""
    Host.objects.filter(pk=host.pk).update(last_report_at=db_now() - timedelta(seconds=60))
    evaluate("beat")
    event = _open("collector_stale", f"{host.name}/collector")
    assert event is not None and event.state == "firing"
    return event


def test_a_worker_an_hour_ahead_stamps_a_delivery_sent_at_the_databases_time(fleet, shift):
    from sparkops.alerts import outbox
    from tests.alerts.servers import WebhookReceiver

    receiver = WebhookReceiver()
    try:
        hook = fleet["webhook"]
        hook.config = {"url": receiver.url, "format": "sparkops"}
        hook.save()
        event = _fire_stale(fleet["host"])
        shift(HOUR)  # the worker that sends it
        for delivery in Delivery.objects.filter(event=event, channel=hook):
            assert outbox.delivery_send(delivery_id=delivery.pk) == "sent"
            delivery.refresh_from_db()
            assert abs((delivery.sent_at - db_now()).total_seconds()) < 5, delivery.sent_at
    finally:
        receiver.close()


def test_a_worker_an_hour_ahead_does_not_renotify_early(fleet, shift):
    from sparkops.alerts.lifecycle import renotify_due

    event = _fire_stale(fleet["host"])
    before = Delivery.objects.filter(event=event).count()
    shift(HOUR + 60)  # past the default renotify interval (1 h) by its own clock only
    assert renotify_due() == 0
    assert Delivery.objects.filter(event=event).count() == before


def test_a_worker_an_hour_ahead_stamps_its_engines_poll_at_the_databases_time(fleet, shift):
    """Issue 45 item 5: Engine.last_poll_at (what /healthz and the fleet's adoption compare) and
    the status's change were the worker's clock: a poll an hour in the future hid a stale worker."""
    import time

    from sparkops.collectors.base import Snapshot
    from sparkops.poller.fetch import Fetched

    engine = fleet["vllm"]
    shift(HOUR)
    _report(fleet["host"])  # the store measures this worker's offset, as every tick does
    pending = PendingWrites(SeriesIds())
    snap = Snapshot(status="down" if engine.status == "up" else "up", error="refused")
    pending.add_engine(engine, Fetched(snap, time.time() + HOUR), {})  # its clock's time of the answer
    pending.flush()
    engine.refresh_from_db()
    assert abs((engine.last_poll_at - db_now()).total_seconds()) < 5, engine.last_poll_at
    assert abs((engine.status_changed_at - db_now()).total_seconds()) < 5, engine.status_changed_at
