"""A death is paged while the database is away, and the record catches up after (issue 46, item 1).

A real engine process watched through a pidfd by a resident poller, a real webhook receiver on
127.0.0.1, and a database that refuses every write for real: each new connection of this process
is made read-only by the database itself (SQLite's PRAGMA query_only, PostgreSQL's
default_transaction_read_only), as a full disk or a read-only switch-over refuses. The page goes
out from the worker's spool during the outage; once writes go through again the alert row is
written with the time the death was seen and its delivery as sent, and nothing is paged twice.
The private PostgreSQL stopped and started under a running worker is `bench/outage.py`'s."""

import json
import signal
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import connection
from django.db.backends.signals import connection_created
from django.utils import timezone

from dashboard.dbgate import GATE, PROBE
from dashboard.models import Engine
from sparkops.alerts.finding import Finding
from sparkops.alerts.models import AlertEvent, Delivery, NotificationChannel
from sparkops.alerts.spool import Spool
from sparkops.poller import exitwatch
from tests.alerts.test_exit_watch import armed, eager, engine_proc  # noqa: F401 (fixtures)
from tests.waiting import serves, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not exitwatch.pidfd_supported(), reason="no pidfds on this kernel"),
]


@pytest.fixture(autouse=True)
def spool_here(settings, tmp_path):
    """The worker's spool in the test's own directory, and this process's gate as new."""
    settings.SPARKOPS_SPOOL_DIR = str(tmp_path / "spool")
    GATE.__init__()
    yield tmp_path / "spool"
    GATE.__init__()


@contextmanager
def read_only_everywhere():
    """Every connection this process opens (or borrows from the pool) while inside refuses
    writes; the ones open now are closed first, so none escapes."""
    on = "PRAGMA query_only = ON" if connection.vendor == "sqlite" else "SET default_transaction_read_only = on"

    def apply(sender, connection, **kwargs):
        with connection.cursor() as cursor:
            cursor.execute(on)

    _close_all()
    connection_created.connect(apply)
    try:
        yield
    finally:
        connection_created.disconnect(apply)
        _close_all()  # no read-only connection outlives the outage, pooled or not


def _close_all():
    connection.close()
    if connection.vendor == "postgresql":
        connection.close_pool()
        PROBE.close()  # the gate's own session goes where the next check's settings say


def _steady(engine, poller):
    """The engine answering, and a steady probe of it done: the liveness rules, their channels
    and memories read, as a worker that has run a while has them."""
    assert wait_for(lambda: serves(engine.url), timeout=30), "the engine never served"
    assert [f.status for f in poller.probe_tick()] == ["up"]


def firing_pages(receiver):
    """(idempotency key, body) of each firing page the receiver accepted."""
    return [(key, body) for key, body in receiver.accepted() if body.get("transition") == "firing"]


def test_a_death_is_paged_from_the_spool_while_the_database_refuses_writes(armed, eager, receiver, spool_here):
    engine, proc, poller = armed
    _steady(engine, poller)
    with read_only_everywhere():
        died = timezone.now()
        proc.send_signal(signal.SIGKILL)
        assert wait_for(lambda: len(firing_pages(receiver)) == 1, timeout=30), "no page during the outage"
        key, body = firing_pages(receiver)[0]
        assert body["rule"] == "engine_down" and body["engine"] == engine.name
        assert key.startswith("sparkops-spool-")
        assert not AlertEvent.objects.exists()  # the database took nothing
        files = list(spool_here.glob("*/alert-*.json"))
        assert len(files) == 1
        # A worker restarted now finds the alert, with its send recorded.
        again = Spool(files[0].parent)
        assert wait_for(lambda: json.loads(files[0].read_text())["sends"][0]["sent_at"] is not None)
        assert len(Spool(files[0].parent)) == len(again) == 1
        poller.probe_tick()  # the backstop probe sees the same death: nothing more
        assert len(firing_pages(receiver)) == 1
    poller.metrics_tick()  # the first store that goes through writes the record
    event = AlertEvent.objects.get(rule="engine_down")
    assert event.state == "firing"
    assert abs(event.started_at - died) < timedelta(seconds=1), (event.started_at, died)
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == "sent" and delivery.idempotency_key == key
    assert delivery.attempt_log.filter(ok=True).count() == 1
    assert not list(spool_here.glob("*/alert-*.json"))  # the spool is empty again
    assert Engine.objects.get(pk=engine.pk).status == "down"
    for _ in range(2):  # the probes after the outage confirm it, and page nobody
        poller.probe_tick()
    assert AlertEvent.objects.filter(rule="engine_down").count() == 1
    assert Delivery.objects.filter(transition="firing").count() == 1
    assert len(firing_pages(receiver)) == 1


def test_a_resolution_seen_during_the_outage_closes_the_alert_written_after(armed, eager, receiver):
    engine, proc, poller = armed
    _steady(engine, poller)
    with read_only_everywhere():
        proc.send_signal(signal.SIGKILL)
        assert wait_for(lambda: len(firing_pages(receiver)) == 1, timeout=30)
        spool = poller.alerts.spool
        entry = spool.holding("engine_down", engine.name)
        # The rule's own resolution, as a probe finding the engine up again makes it.
        spool.resolve_seen(
            rule="engine_down",
            finding=Finding(subject=engine.name, active=False, resolution="up again"),
            seen=timezone.now(),
        )
        assert entry["resolved"] is not None
    poller.metrics_tick()
    event = AlertEvent.objects.get(rule="engine_down")
    assert event.state == "resolved" and "up again" in event.details["resolution"]
    assert len(firing_pages(receiver)) == 1


def test_an_alert_fired_with_no_channel_known_is_paged_by_the_outbox_when_the_record_catches_up(
    fleet, eager, receiver, spool_here
):
    """A worker started moments before the outage had read no channel yet: the spool keeps the
    alert, and the catch-up pages it through the channels the database names."""
    vllm = fleet["vllm"]
    NotificationChannel.objects.exclude(kind="webhook").delete()
    NotificationChannel.objects.filter(kind="webhook").update(config={"url": receiver.url, "format": "sparkops"})
    spool = Spool(spool_here / "box")
    seen = timezone.now() - timedelta(seconds=30)
    finding = Finding(subject=vllm.name, active=True, engine=vllm, cause="refused", message="vllm-main is down")
    assert spool.hold(rule="engine_down", finding=finding, severity="critical", seen=seen) is None  # no channel
    assert spool.catch_up() == 1
    event = AlertEvent.objects.get(rule="engine_down")
    assert abs(event.started_at - seen) < timedelta(seconds=1)
    assert wait_for(lambda: len(firing_pages(receiver)) == 1, timeout=30)
    assert Delivery.objects.get(event=event).status == "sent"
