"""Services of the alerts app: channels, routes, external alerts, acks, silences, maintenance, tests, rules."""

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from dashboard.forms.errors import form_errors_text
from dashboard.models import Engine, Host

from . import lifecycle, outbox
from .finding import Finding
from .forms import ChannelForm
from .lifecycle import alert_observe
from .models import (
    RENOTIFY_MAX_S,
    RENOTIFY_MIN_S,
    AlertEvent,
    AlertRule,
    AlertRuleOverride,
    Delivery,
    MaintenanceWindow,
    NotificationChannel,
    Route,
    Silence,
)
from .notes import note_add
from .payloads import test_payload
from .publish import alert_changed
from .rules import REGISTRY
from .rules.base import Rule, param_bounds
from .severity import SEVERITY_RANK


def channel_create(
    *, name: str, kind: str, address: str = "", url: str = "", secret: str = "", format: str = "sparkops"
) -> NotificationChannel:
    form = ChannelForm(
        data={"name": name, "kind": kind, "address": address, "url": url, "secret": secret, "format": format}
    )
    if not form.is_valid():
        raise ValidationError(form_errors_text(form))
    return NotificationChannel.objects.create(name=name, kind=kind, config=form.config(), secret=secret)


def channel_as_dict(channel: NotificationChannel) -> dict[str, str | bool]:
    return {
        "name": channel.name,
        "kind": channel.kind,
        "target": channel.target,
        "signed": bool(channel.secret),
        "enabled": channel.enabled,
        "health": channel.health,
        "last_error": channel.last_error,
    }


@transaction.atomic
def channel_send_test(*, channel: NotificationChannel, now: datetime | None = None) -> Delivery:
    """Queue one test notification to CHANNEL through the outbox; returns the delivery."""

    now = now or timezone.now()
    n = Delivery.objects.filter(channel=channel, transition="test").count() + 1
    delivery = Delivery.objects.create(
        channel=channel,
        transition="test",
        next_attempt_at=now,
        created_at=now,
        idempotency_key=f"sparkops-test-{channel.pk}-{n}-{int(now.timestamp())}",
        payload=test_payload(channel=channel, now=now),
    )
    outbox.enqueue_on_commit([delivery.pk])
    return delivery


def _check_severity(severity: str) -> None:
    if severity not in SEVERITY_RANK:
        raise ValidationError(f"severity must be one of {', '.join(SEVERITY_RANK)}, not {severity!r}")


def external_alert_fire(
    *,
    rule: str,
    severity: str,
    engine: Engine | None = None,
    host: Host | None = None,
    subject: str,
    message: str,
    cause: str = "",
) -> AlertEvent | None:
    """Fire an alert decided elsewhere (e.g. the benchmark regression); idempotent while it stays open."""
    _check_severity(severity)
    if not rule or not subject:
        raise ValidationError("an alert needs a rule and a subject")
    finding = Finding(
        subject=subject, active=True, engine=engine, host=host, cause=cause, message=message, fire_now=True
    )
    return alert_observe(rule=rule, finding=finding, severity=severity)


def external_alert_resolve(
    *, rule: str, engine: Engine | None = None, host: Host | None = None, subject: str
) -> AlertEvent | None:
    return alert_observe(
        rule=rule, finding=Finding(subject=subject, active=False, engine=engine, host=host), severity="info"
    )


def alert_ack(*, event: AlertEvent, user: User) -> bool:
    if not event.is_open:
        raise ValidationError("only an open alert can be acknowledged")
    return lifecycle.alert_acknowledge(event=event, user=user)


@transaction.atomic
def silence_create(
    *,
    user: User | None = None,
    until: datetime | None = None,
    hours: float | None = None,
    engine: Engine | None = None,
    host: Host | None = None,
    rule: str = "",
    reason: str = "",
    event: AlertEvent | None = None,
) -> Silence:
    """Silence notifications for an engine/host and/or a rule until a time (or for HOURS)."""
    now = timezone.now()
    if until is None:
        if hours is None or hours <= 0:
            raise ValidationError("a silence needs an end time in the future or a positive number of hours")
        until = now + timedelta(hours=hours)
    if until <= now:
        raise ValidationError("the silence must end in the future")
    if event is not None:
        engine, host, rule = event.engine, (None if event.engine_id else event.host), event.rule
    silence = Silence.objects.create(engine=engine, host=host, rule=rule, until=until, reason=reason, created_by=user)
    if event is not None:
        note_add(
            event,
            "silence",
            f"silenced until {until:%Y-%m-%d %H:%M} UTC by {user}" + (f": {reason}" if reason else ""),
            user=user,
        )
        alert_changed(event)
    return silence


def maintenance_create(
    *,
    starts_at: datetime,
    ends_at: datetime,
    engine: Engine | None = None,
    host: Host | None = None,
    reason: str = "",
    user: User | None = None,
) -> MaintenanceWindow:
    if ends_at <= starts_at:
        raise ValidationError("a maintenance window must end after it starts")
    if ends_at <= timezone.now():
        raise ValidationError("a maintenance window must end in the future")
    if engine is not None and host is not None:
        raise ValidationError("a maintenance window covers one engine, one host or everything, not both")
    return MaintenanceWindow.objects.create(
        starts_at=starts_at, ends_at=ends_at, engine=engine, host=host, reason=reason, created_by=user
    )


def _ended_note(reason: str, user: User | None, now: datetime) -> str:
    # The models keep no "ended by"; the reason is what people read, so the early end goes there.
    return f"{reason} (ended early by {user or 'someone'} at {now:%Y-%m-%d %H:%M} UTC)".strip()


@transaction.atomic
def maintenance_end(
    *, window: MaintenanceWindow, user: User | None = None, now: datetime | None = None
) -> MaintenanceWindow | None:
    """End a window now. One that has not started yet is cancelled (deleted): it never suppressed anything."""
    now = now or timezone.now()
    window = MaintenanceWindow.objects.select_for_update().get(pk=window.pk)
    if window.ends_at <= now:
        raise ValidationError("that maintenance window is already over")
    if window.starts_at > now:
        window.delete()
        return None
    window.ends_at, window.reason = now, _ended_note(window.reason, user, now)
    window.save(update_fields=["ends_at", "reason"])
    return window


@transaction.atomic
def silence_end(*, silence: Silence, user: User | None = None, now: datetime | None = None) -> Silence:
    now = now or timezone.now()
    silence = Silence.objects.select_for_update().get(pk=silence.pk)
    if silence.until <= now:
        raise ValidationError("that silence is already over")
    silence.until, silence.reason = now, _ended_note(silence.reason, user, now)
    silence.save(update_fields=["until", "reason"])
    return silence


@transaction.atomic
def channel_routes_set(*, channel: NotificationChannel, routes: Sequence[tuple[str, str]]) -> list[Route]:
    """Replace CHANNEL's routes with ROUTES [(rule or "", min_severity)]; an empty list means everything."""
    rules = [rule for rule, _ in routes]
    if len(set(rules)) != len(rules):
        raise ValidationError("one route per rule")
    for _, severity in routes:
        _check_severity(severity)
    channel.routes.all().delete()
    return Route.objects.bulk_create(Route(channel=channel, rule=rule, min_severity=sev) for rule, sev in routes)


def rule_row(key: str) -> AlertRule:
    """The stored row of rule KEY, created (with the rule's default enablement) when missing."""
    rule = REGISTRY.get(key)
    row, _ = AlertRule.objects.get_or_create(key=key, defaults={"enabled": getattr(rule, "enabled_by_default", True)})
    return row


def rule_update(
    *,
    key: str,
    enabled: bool | None = None,
    severity: str | None = None,
    params: dict[str, Any] | None = None,
    renotify_s: int | None = None,
    engine: Engine | None = None,
) -> AlertRule | AlertRuleOverride:
    """Change a rule's settings (or one engine's override); params are validated against the rule's DEFAULTS."""

    rule = REGISTRY.get(key)
    if rule is None:
        raise ValidationError(f"no rule named {key!r}")
    clean = _clean_params(rule, params or {})
    if renotify_s and not RENOTIFY_MIN_S <= renotify_s <= RENOTIFY_MAX_S:
        raise ValidationError(f"re-notify every {RENOTIFY_MIN_S} s to 7 days ({RENOTIFY_MAX_S} s), not {renotify_s} s")
    row = rule_row(key)
    if engine is not None:
        override, _ = AlertRuleOverride.objects.get_or_create(rule=row, engine=engine)
        override.params = {**override.params, **clean}
        override.enabled = enabled if enabled is not None else override.enabled
        override.save()
        return override
    if severity:
        _check_severity(severity)
        row.severity = severity
    if enabled is not None:
        row.enabled = enabled
    if renotify_s is not None:
        row.renotify_s = renotify_s or None
    row.params = {**row.params, **clean}
    row.save()
    return row


def _clean_params(rule: Rule, params: dict[str, Any]) -> dict[str, float]:
    clean: dict[str, float] = {}
    for name, value in params.items():
        if name not in rule.DEFAULTS:
            raise ValidationError(f"rule {rule.key} has no setting {name!r} (it has {', '.join(rule.DEFAULTS)})")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValidationError(f"{name} must be a number, not {value!r}") from None
        bounds = param_bounds(name)
        if not bounds.holds(number):
            raise ValidationError(f"{name} must be between {bounds.low} and {bounds.high}, not {value}")
        clean[name] = int(number) if isinstance(rule.DEFAULTS[name], int) and number.is_integer() else number
    return clean
