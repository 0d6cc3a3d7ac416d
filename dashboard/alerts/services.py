"""Services of the alerts app: channels, routes, external alerts, acks, silences, maintenance, tests, rules."""

from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from dashboard.engine_lifecycle import form_errors_text

from . import lifecycle, outbox
from .forms import ChannelForm
from .lifecycle import Finding, alert_observe
from .models import (
    RENOTIFY_MAX_S,
    RENOTIFY_MIN_S,
    SEVERITY_RANK,
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
from .rule_config import rule_row
from .rules import REGISTRY
from .rules.base import param_bounds


def channel_create(*, name, kind, address="", url="", secret="", format="sparkops"):
    form = ChannelForm(
        data={"name": name, "kind": kind, "address": address, "url": url, "secret": secret, "format": format}
    )
    if not form.is_valid():
        raise ValidationError(form_errors_text(form))
    return NotificationChannel.objects.create(name=name, kind=kind, config=form.config(), secret=secret)


def channel_as_dict(channel):
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
def channel_send_test(*, channel, now=None):
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


def _check_severity(severity):
    if severity not in SEVERITY_RANK:
        raise ValidationError(f"severity must be one of {', '.join(SEVERITY_RANK)}, not {severity!r}")


def external_alert_fire(*, rule, severity, engine=None, host=None, subject, message, cause=""):
    """Fire an alert decided elsewhere (e.g. the benchmark regression); idempotent while it stays open."""
    _check_severity(severity)
    if not rule or not subject:
        raise ValidationError("an alert needs a rule and a subject")
    finding = Finding(
        subject=subject, active=True, engine=engine, host=host, cause=cause, message=message, fire_now=True
    )
    return alert_observe(rule=rule, finding=finding, severity=severity)


def external_alert_resolve(*, rule, engine=None, host=None, subject):
    return alert_observe(
        rule=rule, finding=Finding(subject=subject, active=False, engine=engine, host=host), severity="info"
    )


def alert_ack(*, event, user):
    if not event.is_open:
        raise ValidationError("only an open alert can be acknowledged")
    return lifecycle.alert_acknowledge(event=event, user=user)


@transaction.atomic
def silence_create(*, user=None, until=None, hours=None, engine=None, host=None, rule="", reason="", event=None):
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


def maintenance_create(*, starts_at, ends_at, engine=None, host=None, reason="", user=None):
    if ends_at <= starts_at:
        raise ValidationError("a maintenance window must end after it starts")
    if ends_at <= timezone.now():
        raise ValidationError("a maintenance window must end in the future")
    if engine is not None and host is not None:
        raise ValidationError("a maintenance window covers one engine, one host or everything, not both")
    return MaintenanceWindow.objects.create(
        starts_at=starts_at, ends_at=ends_at, engine=engine, host=host, reason=reason, created_by=user
    )


def _ended_note(reason, user, now):
    # The models keep no "ended by"; the reason is what people read, so the early end goes there.
    return f"{reason} (ended early by {user or 'someone'} at {now:%Y-%m-%d %H:%M} UTC)".strip()


@transaction.atomic
def maintenance_end(*, window, user=None, now=None):
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
def silence_end(*, silence, user=None, now=None):
    now = now or timezone.now()
    silence = Silence.objects.select_for_update().get(pk=silence.pk)
    if silence.until <= now:
        raise ValidationError("that silence is already over")
    silence.until, silence.reason = now, _ended_note(silence.reason, user, now)
    silence.save(update_fields=["until", "reason"])
    return silence


@transaction.atomic
def channel_routes_set(*, channel, routes):
    """Replace CHANNEL's routes with ROUTES [(rule or "", min_severity)]; an empty list means everything."""
    rules = [rule for rule, _ in routes]
    if len(set(rules)) != len(rules):
        raise ValidationError("one route per rule")
    for _, severity in routes:
        _check_severity(severity)
    channel.routes.all().delete()
    return Route.objects.bulk_create(Route(channel=channel, rule=rule, min_severity=sev) for rule, sev in routes)


def rule_update(*, key, enabled=None, severity=None, params=None, renotify_s=None, engine=None):
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


def _clean_params(rule, params):

    clean = {}
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
