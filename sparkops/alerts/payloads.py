"""What a notification says: one dict per event transition, snapshotted into the outbox row."""

from datetime import datetime
from typing import Any, TypedDict

from django.conf import settings
from django.urls import reverse

from .models import AlertEvent, NotificationChannel


class Latest(TypedDict):
    """The newest finding of a firing event, when it says something else than the first."""

    cause: str
    message: str


class AlertPayload(TypedDict):
    """What a notification says; snapshotted into Delivery.payload, so read back from JSON."""

    id: int | None
    transition: str
    rule: str
    severity: str
    state: str
    subject: str
    engine: str | None
    host: str | None
    cause: str
    message: str
    latest: Latest | None
    resolution: str | None
    started_at: str | None
    resolved_at: str | None
    sent_at: str | None
    link: str


def event_link(event: AlertEvent) -> str:
    return f"{settings.SITE_URL}{reverse('alerts:detail', args=[event.pk])}"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _latest(event: AlertEvent) -> Latest | None:
    latest = (event.details or {}).get("latest")
    if not latest or (latest.get("cause"), latest.get("message")) == (event.cause, event.message):
        return None
    return {"cause": latest.get("cause") or "", "message": latest.get("message") or ""}


def _host_name(event: AlertEvent) -> str | None:
    if event.host is not None:
        return event.host.name
    return event.engine.host.name if event.engine is not None else None


def event_payload(event: AlertEvent, *, transition: str, now: datetime) -> AlertPayload:
    return {
        "id": event.pk,
        "transition": transition,
        "rule": event.rule,
        "severity": event.severity,
        "state": event.state,
        "subject": event.subject,
        "engine": event.engine.name if event.engine is not None else None,
        "host": _host_name(event),
        # What it fired with, always (a resolution does not rewrite it).
        "cause": event.cause,
        "message": event.message,
        # The newest finding while firing, when it says something else (e.g. "the unit is starting").
        "latest": _latest(event) if event.state != "resolved" else None,
        # How it ended, on a resolution: "up again after 1 min 57 s, restarted by systemd (NRestarts 0 → 1)".
        "resolution": (event.details or {}).get("resolution") if event.state == "resolved" else None,
        "started_at": _iso(event.fired_at or event.started_at),
        "resolved_at": _iso(event.resolved_at),
        "sent_at": _iso(now),
        "link": event_link(event),
    }


def test_payload(*, channel: NotificationChannel, now: datetime) -> AlertPayload:
    return {
        "id": None,
        "transition": "test",
        "rule": "test",
        "severity": "info",
        "state": "firing",
        "subject": channel.name,
        "engine": None,
        "host": None,
        "cause": "test",
        "message": f"Test notification from SparkOps to channel {channel.name}.",
        "latest": None,
        "resolution": None,
        "started_at": now.isoformat(),
        "resolved_at": None,
        "sent_at": now.isoformat(),
        "link": f"{settings.SITE_URL}{reverse('alerts:channels')}",
    }


def alertmanager_body(payload: AlertPayload) -> dict[str, Any]:
    """Alertmanager webhook format (version 4) so existing receivers work unchanged."""
    status = "resolved" if payload["transition"] == "resolved" else "firing"
    labels = {"alertname": payload["rule"], "severity": payload["severity"], "subject": payload["subject"]}
    for key, value in (("engine", payload.get("engine")), ("host", payload.get("host"))):
        if value:
            labels[key] = value
    latest = payload.get("latest")
    alert: dict[str, Any] = {
        "status": status,
        "labels": labels,
        "annotations": {
            "summary": payload["message"],
            "cause": payload["cause"] or "",
            **({"resolution": payload["resolution"]} if payload.get("resolution") else {}),
            **({"latest": latest["message"]} if latest else {}),
        },
        "startsAt": payload["started_at"],
        "endsAt": payload["resolved_at"] or "0001-01-01T00:00:00Z",
        "generatorURL": payload["link"],
        "fingerprint": f"sparkops-{payload['id']}",
    }
    return {
        "version": "4",
        "groupKey": f"sparkops:{payload['rule']}:{payload['subject']}",
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "sparkops",
        "groupLabels": {"alertname": payload["rule"]},
        "commonLabels": labels,
        "commonAnnotations": alert["annotations"],
        "externalURL": payload["link"],
        "alerts": [alert],
    }
