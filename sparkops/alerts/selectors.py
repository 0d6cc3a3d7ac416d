"""Read-side queries of the alerts pages and the live view."""

from collections.abc import Sequence
from datetime import datetime
from typing import TypeVar

from django.db.models import Count, Prefetch, Q
from django.utils import timezone

from .models import AlertEvent, Delivery, MaintenanceWindow, NotificationChannel, Silence

EventsT = TypeVar("EventsT", bound=Sequence[AlertEvent])


def firing_alerts() -> list[AlertEvent]:
    """Firing alerts for the live view, by severity (critical, warning, info), then newest first: an
    acknowledged critical stays above any warning or advisory."""
    qs = (
        AlertEvent.objects.filter(state="firing")
        .select_related("engine", "host", "acknowledged_by")
        .order_by("-fired_at", "-pk")
    )
    rank = {"critical": 0, "warning": 1, "info": 2}
    events = sorted(qs, key=lambda e: rank.get(e.severity, 3))  # a stable sort keeps newest first within a severity
    return mark_suppressed(events)


def _covers(
    rule_or_none: str | None, engine_id: int | None, host_id: int | None, event: AlertEvent, engine_host_id: int | None
) -> bool:
    """Whether a silence/maintenance row (its rule, engine, host) covers EVENT (as outbox.suppression_of reads it)."""
    if rule_or_none not in (None, "", event.rule):
        return False
    if engine_id is None and host_id is None:
        return True
    if engine_id is not None:
        return engine_id == event.engine_id
    return host_id in (event.host_id, engine_host_id)


def mark_suppressed(events: EventsT, *, now: datetime | None = None) -> EventsT:
    """Set .silenced_by (the active Silence that covers it, latest end first) and .maintenance (the active
    window) on each of EVENTS, for the live view's marks; two queries whatever the number of events (a mark's
    title names the row's engine or host: fetched with it)."""
    now = now or timezone.now()
    silences = (
        sorted(
            Silence.objects.filter(until__gt=now).select_related("engine", "host", "created_by"),
            key=lambda s: s.until,
            reverse=True,
        )
        if events
        else []
    )
    windows = (
        list(
            MaintenanceWindow.objects.filter(starts_at__lte=now, ends_at__gt=now).select_related(
                "engine", "host", "created_by"
            )
        )
        if events
        else []
    )
    for event in events:
        host_of_engine = event.engine.host_id if event.engine is not None else None
        event.silenced_by = next(
            (s for s in silences if _covers(s.rule, s.engine_id, s.host_id, event, host_of_engine)), None
        )
        event.maintenance = next(
            (w for w in windows if _covers(None, w.engine_id, w.host_id, event, host_of_engine)), None
        )
    return events


def alert_list(*, state: str = "", rule: str = "", engine: str = "", limit: int = 200) -> list[AlertEvent]:
    qs = AlertEvent.objects.select_related("engine", "host", "acknowledged_by")
    if state == "open":
        qs = qs.filter(state__in=AlertEvent.OPEN_STATES)
    elif state:
        qs = qs.filter(state=state)
    if rule:
        qs = qs.filter(rule=rule)
    if engine:
        qs = qs.filter(engine__name=engine)
    return list(qs[:limit])


def alert_detail(*, pk: int) -> AlertEvent:
    deliveries = Delivery.objects.select_related("channel").prefetch_related("attempt_log")
    return (
        AlertEvent.objects.select_related("engine", "host", "acknowledged_by", "incident")
        .prefetch_related("notes__user", Prefetch("deliveries", queryset=deliveries))
        .get(pk=pk)
    )


def active_silences(*, now: datetime | None = None) -> list[Silence]:
    return list(Silence.objects.filter(until__gt=now or timezone.now()).select_related("engine", "host", "created_by"))


def maintenance_windows(*, now: datetime | None = None) -> list[MaintenanceWindow]:
    """Active and upcoming windows, soonest first."""
    return list(
        MaintenanceWindow.objects.filter(ends_at__gt=now or timezone.now())
        .select_related("engine", "host", "created_by")
        .order_by("starts_at", "pk")
    )


def channels_with_recent(*, per_channel: int = 5) -> list[NotificationChannel]:
    """Channels with their routes, last PER_CHANNEL deliveries (.recent) and undelivered count (.stuck):
    three queries whatever the number of channels."""
    recent = Delivery.objects.order_by("-created_at", "-id")[:per_channel]
    return list(
        NotificationChannel.objects.annotate(
            stuck=Count("deliveries", filter=Q(deliveries__status__in=["pending", "sending"]))
        ).prefetch_related("routes", Prefetch("deliveries", queryset=recent, to_attr="recent"))
    )


def rule_keys_seen() -> list[str]:
    return list(AlertEvent.objects.order_by().values_list("rule", flat=True).distinct())
