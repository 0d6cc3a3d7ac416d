"""The notification outbox: rows written before sending, claimed with a conditional UPDATE.

A delivery moves pending → sending (claimed, with a lease) → sent | pending (retry later) |
failed. A worker that dies mid-send leaves a lapsed lease; the sweep puts the row back to
pending. Receivers dedupe on the Idempotency-Key, one key per event transition and channel.

The transitions of one alert reach one channel in the order they happened: a delivery is
not claimable while an earlier delivery of the same event to the same channel is unsettled
(pending, retrying or sending, a lost send included). So a resolve never overtakes its
firing, even when a worker died mid-send and the firing waits for the sweep; once the
earlier one is sent or has finally failed, the next one is queued at once.

The `alerts.deliver` task that sends one row is here, with the sends that queue it (a thin task:
by id, to `delivery_send`); the other alert tasks are in alerts/tasks.py."""

import logging
import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from celery import shared_task
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, Value
from django.db.models.functions import Coalesce

from dashboard.clock import db_now

from . import conf
from .models import AlertEvent, Delivery, DeliveryAttempt, MaintenanceWindow, NotificationChannel, Silence
from .notes import note_add
from .payloads import event_payload
from .transports import TransportError, transport_for

log = logging.getLogger(__name__)


def suppression_of(event: AlertEvent, *, now: datetime) -> Silence | MaintenanceWindow | None:
    """The active silence or maintenance window covering EVENT, or None."""
    subject = Q(engine__isnull=True, host__isnull=True)
    if event.engine is not None:
        subject |= Q(engine_id=event.engine_id)
        subject |= Q(host_id=event.engine.host_id, engine__isnull=True)
    if event.host_id:
        subject |= Q(host_id=event.host_id, engine__isnull=True)
    silence = Silence.objects.filter(subject, Q(rule="") | Q(rule=event.rule), until__gt=now).first()
    if silence:
        return silence
    return MaintenanceWindow.objects.filter(subject, starts_at__lte=now, ends_at__gt=now).first()


def channels_for(event: AlertEvent) -> list[NotificationChannel]:
    channels = []
    for channel in NotificationChannel.objects.filter(enabled=True).prefetch_related("routes"):
        routes = list(channel.routes.all())
        if not routes or any(r.matches(event.rule, event.severity) for r in routes):
            channels.append(channel)
    return channels


def notify(*, event: AlertEvent, transition: str, now: datetime | None = None) -> list[Delivery]:
    """Write the deliveries of one transition (inside the caller's transaction); send after commit."""
    now = now or db_now()
    if transition == "resolved":
        # Tell exactly the channels that heard it fire, whatever the routes or silences say now.
        channels = list(
            NotificationChannel.objects.filter(deliveries__event=event, deliveries__transition="firing").distinct()
        )
    else:
        suppressed = suppression_of(event, now=now)
        if suppressed:
            note_add(event, "suppressed", f"{transition} notification suppressed by {suppressed}", at=now)
            return []
        channels = channels_for(event)
    rows = [_delivery(event, channel, transition, now) for channel in channels]
    if rows:
        AlertEvent.objects.filter(pk=event.pk).update(last_notified_at=now)
        note_add(event, "notify", f"{transition} → {', '.join(c.name for c in channels)}", at=now)
    enqueue_on_commit([d.pk for d in rows])
    return rows


def _delivery(event: AlertEvent, channel: NotificationChannel, transition: str, now: datetime) -> Delivery:
    seq = ""
    if transition == "renotify":
        seq = str(Delivery.objects.filter(event=event, channel=channel, transition="renotify").count() + 1)
    key = f"sparkops-{event.pk}-{transition}{seq}-{channel.pk}"
    return Delivery.objects.create(
        event=event,
        channel=channel,
        transition=transition,
        idempotency_key=key,
        next_attempt_at=now,
        created_at=now,
        payload=event_payload(event, transition=transition, now=now),
    )


def enqueue_on_commit(ids: Sequence[int]) -> None:
    if ids:
        transaction.on_commit(lambda: enqueue(ids))


def enqueue(ids: Iterable[int]) -> None:

    for pk in ids:
        try:
            deliver.delay(pk)
        except Exception as exc:  # broker down: the sweep re-queues the row later
            log.warning("could not enqueue delivery %s: %s", pk, exc)


UNSETTLED = ("pending", "sending")


def _behind_an_earlier() -> Exists:
    """True for a delivery that must wait: an earlier one of its event and channel is unsettled."""
    return Exists(
        Delivery.objects.filter(
            event_id=OuterRef("event_id"),
            channel_id=OuterRef("channel_id"),
            pk__lt=OuterRef("pk"),
            status__in=UNSETTLED,
        )
    )


def claim(pk: int, *, now: datetime | None = None) -> bool:
    """Take delivery PK for sending; False when someone else has it, it is not due, or it
    waits for an earlier delivery of its event to its channel."""
    now = now or db_now()
    lease = now + timedelta(seconds=conf.claim_lease_s())
    return (
        Delivery.objects.filter(pk=pk, status="pending", next_attempt_at__lte=now)
        .exclude(_behind_an_earlier())
        .update(status="sending", claimed_until=lease)
        == 1
    )


def _release_next(delivery: Delivery) -> None:
    """DELIVERY has settled: queue the next delivery of its event to its channel, if one waits."""
    if delivery.event_id is None:
        return
    waiting = (
        Delivery.objects.filter(
            event_id=delivery.event_id, channel_id=delivery.channel_id, pk__gt=delivery.pk, status="pending"
        )
        .order_by("pk")
        .values_list("pk", flat=True)
        .first()
    )
    if waiting is not None:
        enqueue_on_commit([waiting])


def delivery_send(*, delivery_id: int) -> str | None:
    """Claim, send once, record the attempt. Returns the delivery's status afterwards (or None: not ours)."""
    if not claim(delivery_id):
        return None
    delivery = Delivery.objects.select_related("channel", "event").get(pk=delivery_id)
    started = time.monotonic()
    try:
        transport_for(delivery.channel).send(delivery)
    except TransportError as exc:
        return _record_failure(delivery, exc, (time.monotonic() - started) * 1000)
    except Exception as exc:  # a bug in a transport is permanent for this row, never a worker crash
        log.exception("transport crashed on delivery %s", delivery_id)
        return _record_failure(
            delivery, TransportError(f"internal error: {exc}", permanent=True), (time.monotonic() - started) * 1000
        )
    return _record_success(delivery, (time.monotonic() - started) * 1000)


@shared_task(name="alerts.deliver", ignore_result=True)
def deliver(delivery_id: int) -> None:
    delivery_send(delivery_id=delivery_id)


def _record_success(delivery: Delivery, ms: float) -> str:
    now = db_now()  # the database's clock: other processes compare these times
    with transaction.atomic():
        DeliveryAttempt.objects.create(delivery=delivery, at=now, ok=True, duration_ms=ms)
        Delivery.objects.filter(pk=delivery.pk).update(
            status="sent",
            sent_at=now,
            attempts=delivery.attempts + 1,
            duration_ms=ms,
            last_error="",
            claimed_until=None,
        )
        NotificationChannel.objects.filter(pk=delivery.channel_id, health="failing").update(
            health="ok", last_error="", failing_since=None
        )
        _release_next(delivery)
    return "sent"


def _record_failure(delivery: Delivery, exc: TransportError, ms: float) -> str:
    now = db_now()  # the database's clock: other processes compare these times
    attempts = delivery.attempts + 1
    give_up = exc.permanent or (now - delivery.created_at).total_seconds() >= conf.retry_for_s()
    fields: dict[str, Any] = {
        "attempts": attempts,
        "last_error": str(exc)[:2000],
        "duration_ms": ms,
        "claimed_until": None,
    }
    if give_up:
        fields["status"] = "failed"
    else:
        fields.update(status="pending", next_attempt_at=now + timedelta(seconds=backoff_s(attempts)))
    with transaction.atomic():
        DeliveryAttempt.objects.create(
            delivery=delivery, at=now, ok=False, permanent=exc.permanent, error=str(exc)[:2000], duration_ms=ms
        )
        Delivery.objects.filter(pk=delivery.pk).update(**fields)
        if exc.permanent:
            channel_mark_failing(channel=delivery.channel, error=str(exc), now=now)
        if give_up:
            _release_next(delivery)
    return fields["status"]


def backoff_s(attempts: int) -> float:
    """Capped exponential backoff: base, 2·base, 4·base … up to the cap."""
    return min(conf.retry_cap_s(), conf.retry_base_s() * (2 ** max(0, attempts - 1)))


def channel_mark_failing(*, channel: NotificationChannel, error: str, now: datetime) -> None:
    # failing_since keeps the first failure of a run of them.
    NotificationChannel.objects.filter(pk=channel.pk).update(
        health="failing", last_error=error[:2000], failing_since=Coalesce("failing_since", Value(now))
    )


def sweep(*, now: datetime | None = None) -> list[int]:
    """Re-queue what was lost: lapsed claims back to pending, then enqueue every due pending
    row that is not waiting for an earlier one (that one is queued when the earlier settles)."""
    now = now or db_now()
    lapsed = Q(status="sending", claimed_until__lt=now)
    if not Delivery.objects.filter(lapsed | Q(status="pending", next_attempt_at__lte=now)).exists():
        return []  # the usual case, every few seconds: one indexed query
    Delivery.objects.filter(lapsed).update(status="pending", claimed_until=None)
    due = list(
        Delivery.objects.filter(status="pending", next_attempt_at__lte=now)
        .exclude(_behind_an_earlier())
        .values_list("pk", flat=True)[:500]
    )
    enqueue(due)
    return due
