"""The alert lifecycle: pending (its duration) → firing → resolved, one open event per rule+subject.

Rules report findings; `alert_observe` turns each into state changes, notes, an incident for
critical alerts, outbox rows and a live event. Every change happens in one transaction and
the notifications leave only after it commits."""

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from dashboard.clock import db_now, to_shared
from dashboard.models import Engine, Incident

from . import outbox
from .finding import Finding
from .models import AlertEvent
from .notes import note_add
from .publish import alert_changed
from .rule_config import renotify_interval_s

# What an event's details hold besides the fired finding's own: the newest explanation while
# firing, and how it ended.
LATEST, RESOLUTION = "latest", "resolution"
CAUSE_RENOTIFIED = "cause_renotified"  # the one re-page a definitive cause learned late gets was sent


def fired_details(event: AlertEvent) -> dict[str, Any]:
    """The details the event fired (or, while pending, was last seen) with."""
    return {
        k: v
        for k, v in (event.details or {}).items()
        if k not in (LATEST, RESOLUTION, CAUSE_RENOTIFIED, "resolved_reason")
    }


def newest(event: AlertEvent) -> tuple[str, str, dict[str, Any]]:
    """(cause, message, details) of the newest finding of EVENT: once it fires, its own cause and
    message stay the ones it fired with, and later findings are kept beside them as details["latest"]."""
    latest = (event.details or {}).get(LATEST)
    if latest:
        return latest.get("cause", ""), latest.get("message", ""), latest.get("details") or {}
    return event.cause, event.message, fired_details(event)


def _open_event(rule: str, subject: str) -> AlertEvent | None:
    return (
        AlertEvent.objects.select_for_update()
        .filter(rule=rule, subject=subject, state__in=AlertEvent.OPEN_STATES)
        .first()
    )


def _engine_retired(engine: Engine | None) -> bool:
    """Whether ENGINE is retired in the database (not as the caller's copy says: a poller may hold
    one read before). On PostgreSQL the row is held FOR KEY SHARE until the commit: a retirement
    (which takes it FOR UPDATE) waits for this observation and then resolves what it opened, or
    this waits for the retirement and sees it. Plain status updates of the row are not blocked."""
    if engine is None or engine.pk is None:
        return False

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT retired_at FROM {Engine._meta.db_table} WHERE id = %s FOR KEY SHARE", [engine.pk])
            row = cursor.fetchone()
        return row is None or row[0] is not None
    return not Engine.objects.filter(pk=engine.pk, retired_at__isnull=True).exists()


@transaction.atomic
def alert_observe(
    *, rule: str, finding: Finding, severity: str, for_s: float = 0.0, now: datetime | None = None
) -> AlertEvent | None:
    """Apply one finding; returns the open or just-resolved event (None when nothing is open).
    No rule fires for a retired engine: its active findings are dropped (nothing is expected of it).
    Its times are the database's clock (dashboard/clock.py), not this process's."""
    now = now or db_now()
    if finding.active and _engine_retired(finding.engine):
        return None
    event = _open_event(rule, finding.subject)
    if not finding.active:
        return _resolve(event, now, resolution=finding.resolution, resolved_by=finding.resolved_by) if event else None
    if event is None:
        event = _create(rule, finding, finding.severity or severity, now)
        if event is None:  # another worker opened it between our read and insert
            event = _open_event(rule, finding.subject)
        if event is None:  # and it closed again before this read: nothing is open
            return None
    else:
        _refresh(event, finding, finding.severity or severity)
    wait = finding.for_s if finding.for_s is not None else for_s
    if event.state == AlertEvent.State.PENDING and (
        finding.fire_now or (now - event.started_at).total_seconds() >= wait
    ):
        _fire(event, now)
    return event


def _started_at(finding: Finding, now: datetime) -> datetime:
    """When FINDING's condition started, by the database's clock: when it was seen (converted
    from the observer's clock), never later than NOW."""
    if finding.observed_at is None:
        return now
    return min(now, to_shared(finding.observed_at))


def _create(rule: str, finding: Finding, severity: str, now: datetime) -> AlertEvent | None:
    started = _started_at(finding, now)
    try:
        with transaction.atomic():
            event = AlertEvent.objects.create(
                rule=rule,
                severity=severity,
                subject=finding.subject,
                engine=finding.engine,
                host=finding.host,
                cause=finding.cause,
                message=finding.message,
                details=finding.details,
                started_at=started,
            )
    except IntegrityError:
        return None
    note_add(event, "pending", finding.message, at=started)
    return event


def _refresh(event: AlertEvent, finding: Finding, severity: str) -> None:
    """Keep the newest explanation. While pending it is the event's own (its severity too: a
    planned restart that turns out a crash fires as the warning a crash is); once firing, the
    cause and message it fired with stay (the history and the resolved notification say what
    happened), and the newest finding goes beside them as details["latest"]; a cause learned
    later (e.g. the unit state arrived) goes on the timeline either way."""
    if event.state == AlertEvent.State.FIRING:
        return _refresh_firing(event, finding, severity)
    changed: list[str] = []
    if severity and severity != event.severity:
        event.severity = severity
        changed.append("severity")
    if finding.cause and finding.cause != event.cause:
        note_add(event, "cause", f"cause now {finding.cause}: {finding.message}")
        event.cause = finding.cause
        changed.append("cause")
    if finding.message and finding.message != event.message:
        event.message = finding.message
        changed.append("message")
    if finding.details != event.details:
        event.details = finding.details
        changed.append("details")
    if changed:
        event.save(update_fields=changed)


def _refresh_firing(event: AlertEvent, finding: Finding, severity: str | None = None) -> None:
    if severity == "critical" and event.severity != "critical":
        return _escalate(event, finding)
    cause, message, details = newest(event)
    was_definitive = bool(details.get("definitive"))
    renotified = bool((event.details or {}).get(CAUSE_RENOTIFIED))
    new_cause = finding.cause or cause
    latest = {"cause": new_cause, "message": finding.message or message, "details": finding.details}
    if (latest["cause"], latest["message"], latest["details"]) == (cause, message, details):
        return
    if (latest["cause"], latest["message"], latest["details"]) == (event.cause, event.message, fired_details(event)):
        event.details = fired_details(event)  # back to what it fired with
    else:
        event.details = {**fired_details(event), LATEST: latest}
    # A definitive cause learned after firing is worth a second page, once per event: a cause
    # that flips (a skewed or flapping reading) must not page at each flip.
    renotify = new_cause != cause and finding.renotify_on_cause and not was_definitive and not renotified
    if renotified or renotify:
        event.details[CAUSE_RENOTIFIED] = True
    event.save(update_fields=["details"])
    if new_cause != cause:
        note_add(event, "cause", f"cause now {new_cause}: {latest['message']}")
        if renotify:
            outbox.notify(event=event, transition="renotify")
        alert_changed(event)


def _escalate(event: AlertEvent, finding: Finding) -> None:
    """A warning that became critical (a crash systemd restarts that then does not come back): it
    takes the finding's cause and message, opens its incident and pages, once."""
    note_add(event, "cause", f"now critical, cause {finding.cause}: {finding.message}")
    event.severity, event.cause, event.message = "critical", finding.cause or event.cause, finding.message
    event.details = {**finding.details, CAUSE_RENOTIFIED: True}
    event.incident = Incident.objects.create(
        opened_at=event.started_at,
        engine=event.engine,
        unit=getattr(event.engine, "unit", "") or "",
        trigger=f"{event.rule}: {event.message}"[:2000],
    )
    event.save(update_fields=["severity", "cause", "message", "details", "incident"])
    outbox.notify(event=event, transition="renotify")
    alert_changed(event)


def _fire(event: AlertEvent, now: datetime) -> None:
    event.state = AlertEvent.State.FIRING
    event.fired_at = now
    if event.severity == "critical":
        event.incident = Incident.objects.create(
            opened_at=event.started_at,
            engine=event.engine,
            unit=getattr(event.engine, "unit", "") or "",
            trigger=f"{event.rule}: {event.message}"[:2000],
        )
    event.save(update_fields=["state", "fired_at", "incident"])
    note_add(event, "firing", event.message, at=now)
    outbox.notify(event=event, transition="firing", now=now)
    alert_changed(event)


def _resolve(
    event: AlertEvent, now: datetime, reason: str = "", *, resolution: str = "", resolved_by: str = ""
) -> AlertEvent | None:
    """Close EVENT. Its cause and message stay the ones it fired with; details["resolution"] says
    how it ended, e.g. "up again after 1 min 57 s, restarted by systemd (NRestarts 0 → 1)"."""
    if event.state == AlertEvent.State.PENDING:
        # Never confirmed: a blip that resolved inside its pending duration leaves no trace.
        event.delete()
        return None
    lasted = _duration_text(now - (event.fired_at or event.started_at))
    resolved_by = _restarted_by_person(event) or resolved_by
    sentence = f"{resolution or 'cleared'} after {lasted}" + (f", {resolved_by}" if resolved_by else "")
    event.state = AlertEvent.State.RESOLVED
    event.resolved_at = now
    event.details = {**(event.details or {}), RESOLUTION: sentence}
    if reason:
        event.details["resolved_reason"] = reason
    event.save(update_fields=["state", "resolved_at", "details"])
    note_add(event, "resolved", f"resolved: {sentence}", at=now)
    if event.incident is not None and not event.incident.peak:
        Incident.objects.filter(pk=event.incident.pk).update(peak=f"lasted {lasted}")
    outbox.notify(event=event, transition="resolved", now=now)
    alert_changed(event)
    return event


def _restarted_by_person(event: AlertEvent) -> str:
    """ "restarted by NAME (the Restart button)" when a person's restart of the unit, asked for on
    this alert, was done (dashboard/unit_actions.py writes both on its timeline); else ""."""
    notes = list(event.notes.filter(kind="unit_action").select_related("user").order_by("at", "id"))
    for i, note in enumerate(notes):
        if note.user is not None and any(later.text.endswith(": done") for later in notes[i + 1 :]):
            return f"restarted by {note.user.get_username()} (the Restart button)"
    return ""


@transaction.atomic
def alerts_resolve_engine(*, engine: Engine, reason: str, now: datetime | None = None) -> list[AlertEvent]:
    """Resolve every open event of ENGINE (any rule) with REASON, e.g. "retired": nothing will
    poll it again, so nothing else would. Firing ones notify their resolution as usual;
    pending ones (never confirmed) go. Returns the resolved events."""
    now = now or db_now()
    events = AlertEvent.objects.select_for_update().filter(engine=engine, state__in=AlertEvent.OPEN_STATES)
    how = {"retired": "the engine was retired: nothing polls it any more"}.get(reason, reason)
    resolved = (_resolve(event, now, reason, resolution="closed", resolved_by=how) for event in events.order_by("pk"))
    return [e for e in resolved if e is not None]


def _duration_text(delta: timedelta) -> str:
    """ "57 s", "1 min 57 s", "2 h 5 min"."""
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min" + (f" {seconds % 60} s" if seconds % 60 else "")
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


@transaction.atomic
def alert_acknowledge(*, event: AlertEvent, user: User, now: datetime | None = None) -> bool:
    now = now or timezone.now()
    updated = AlertEvent.objects.filter(pk=event.pk, acknowledged_at__isnull=True).update(
        acknowledged_by=user, acknowledged_at=now
    )
    if updated:
        event.refresh_from_db()
        note_add(event, "ack", f"acknowledged by {user}", user=user, at=now)
        alert_changed(event)
    return bool(updated)


def renotify_due(*, now: datetime | None = None) -> int:
    """Re-notify firing, unacknowledged critical alerts whose last notification is older than their interval."""
    now = now or db_now()
    interval_s = renotify_interval_s()
    count = 0
    for listed in AlertEvent.objects.filter(**_RENOTIFIABLE):
        if not _renotify_is_due(listed, interval_s, now):
            continue
        with transaction.atomic():
            # Lock and look again: it may have been acked, resolved or re-notified (a cause learned
            # late) since the list was read; _refresh holds the same lock when it re-notifies.
            event = AlertEvent.objects.select_for_update().filter(pk=listed.pk, **_RENOTIFIABLE).first()
            if event is None or not _renotify_is_due(event, interval_s, now):
                continue
            if outbox.notify(event=event, transition="renotify", now=now):
                count += 1
            else:
                AlertEvent.objects.filter(pk=event.pk).update(last_notified_at=now)
    return count


_RENOTIFIABLE: dict[str, Any] = {"state": "firing", "severity": "critical", "acknowledged_at__isnull": True}


def _renotify_is_due(event: AlertEvent, interval_s: Callable[[str], float], now: datetime) -> bool:
    last = event.last_notified_at or event.fired_at
    return last is not None and now - last >= timedelta(seconds=interval_s(event.rule))
