"""Services of the operator's own rules (alerts/custom.py): one validation for the page, the CLI,
the API and the configuration import, so a definition refused in one is refused in all, with
the same reason; create, remove, export and import.

A rule's channels are the routes of its key. A channel without routes already receives every
rule (models.Route), so naming it adds no route: a route would narrow it to this rule alone."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from dashboard.models import Engine, Host
from dashboard.names import NameValidator

from .custom import metric_examples, metric_known
from .custom_model import FOR_MAX_S, NAME_MAX, CustomRule
from .finding import Finding
from .lifecycle import alert_observe
from .models import AlertEvent, NotificationChannel, Route
from .severity import Severity

FIELDS = ("name", "scope", "engine", "host", "metric", "comparator", "threshold", "for", "severity", "channels")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|sec|m|min|h)?", re.IGNORECASE)
_UNIT_S = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}


def duration_parse(text: object) -> int:
    """Seconds of "300", "90s", "5m", "5 min" or "1h"; ValueError with the reason otherwise."""
    match = _DURATION.fullmatch(str(text).strip())
    if not match:
        raise ValueError(f"'{text}' is not a duration: write seconds (300) or 90s, 5m, 1h")
    seconds = float(match.group(1)) * _UNIT_S[(match.group(2) or "").lower()]
    if seconds > FOR_MAX_S:
        raise ValueError(f"{text} is longer than 30 days")
    return round(seconds)


def custom_rule_clean(*, data: dict[str, Any], existing: CustomRule | None = None) -> dict[str, Any]:
    """The model fields (and "channels": [NotificationChannel]) of DATA, a definition as the page,
    the CLI, the API or an export writes it; ValidationError {field: reason} for each bad one.
    EXISTING: the rule being replaced (its own name is not taken)."""
    errors: dict[str, str] = {}
    clean: dict[str, Any] = {}

    def check(field: str, parse: Callable[[Any], object]) -> None:
        try:
            clean[field] = parse(data.get(field))
        except (ValueError, ValidationError) as exc:
            errors[field] = "; ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)

    check("name", lambda v: _name(v, existing))
    check("scope", _scope)
    scope = clean.get("scope", CustomRule.Scope.ENGINE)
    check("engine", lambda v: _subject(Engine, v, scope == CustomRule.Scope.ENGINE, "engine"))
    check("host", lambda v: _subject(Host, v, scope == CustomRule.Scope.HOST, "host"))
    check("metric", lambda v: _metric(v, scope))
    check("comparator", _comparator)
    check("threshold", _threshold)
    check("for_s", lambda _: duration_parse(data.get("for", data.get("for_s", 0)) or 0))
    check("severity", _severity)
    check("channels", _channels)
    if "for_s" in errors:
        errors["for"] = errors.pop("for_s")
    if errors:
        raise ValidationError({field: [text] for field, text in errors.items()})
    clean["enabled"] = _enabled(data.get("enabled", True))
    return clean


def _name(value: Any, existing: CustomRule | None) -> str:
    name = str(value or "").strip()
    NameValidator()(name)
    if len(name) > NAME_MAX:
        raise ValueError(f"'{name}' is {len(name)} characters; a custom rule's name has at most {NAME_MAX}")
    taken = CustomRule.objects.filter(name=name)
    if existing is not None:
        taken = taken.exclude(pk=existing.pk)
    if taken.exists():
        raise ValueError(f"a custom rule named '{name}' exists; remove it first or pick another name")
    return name


def _scope(value: Any) -> str:
    scope = str(value or CustomRule.Scope.ENGINE).strip()
    if scope not in CustomRule.Scope.values:
        raise ValueError(f"'{scope}' is not a scope: engine or host")
    return scope


def _subject(model: type[Engine] | type[Host], value: Any, applies: bool, what: str) -> Engine | Host | None:
    name = str(value or "").strip()
    if not name:
        return None
    if not applies:
        raise ValueError(f"a rule on {'an engine' if what == 'host' else 'a host'} metric names no {what}")
    found = model.objects.filter(name=name).first()
    if found is None:
        raise ValueError(f"no {what} named '{name}' (leave it blank for every {what})")
    return found


def _metric(value: Any, scope: str) -> str:
    metric = str(value or "").strip()
    if not metric:
        raise ValueError("name the metric, e.g. kv_cache_usage")
    if not metric_known(scope=scope, metric=metric):
        raise ValueError(f"unknown {scope} metric '{metric}': SparkOps stores {metric_examples(scope)}")
    return metric


def _comparator(value: Any) -> str:
    comparator = str(value or "").strip()
    aliases = {"above": ">", "gt": ">", "ge": ">=", "below": "<", "lt": "<", "le": "<="}
    comparator = aliases.get(comparator.lower(), comparator)
    if comparator not in CustomRule.Comparator.values:
        raise ValueError(f"'{comparator}' is not a comparator: >, >=, < or <=")
    return comparator


def _threshold(value: Any) -> float:
    try:
        number = float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
    except ValueError:
        raise ValueError(f"'{value}' is not a number") from None
    if isinstance(value, bool) or not math.isfinite(number):
        raise ValueError(f"'{value}' is not a finite number")
    return number


def _severity(value: Any) -> str:
    severity = str(value or Severity.WARNING).strip()
    if severity not in Severity.values:
        raise ValueError(f"'{severity}' is not a severity: info, warning or critical")
    return severity


def _channels(value: Any) -> list[NotificationChannel]:
    names = [n.strip() for n in (value.split(",") if isinstance(value, str) else value or []) if str(n).strip()]
    found = {c.name: c for c in NotificationChannel.objects.filter(name__in=names)}
    missing = [n for n in names if n not in found]
    if missing:
        raise ValueError(f"no channel named {', '.join(repr(n) for n in missing)}")
    return [found[n] for n in dict.fromkeys(names)]


def _enabled(value: Any) -> bool:
    return value not in (False, "false", "False", "0", "no", "off", 0)


@transaction.atomic
def custom_rule_create(*, data: dict[str, Any], existing: CustomRule | None = None) -> CustomRule:
    """Create (or, with EXISTING, replace) a custom rule from DATA (see custom_rule_clean) and
    route its chosen channels; a refused definition changes nothing."""
    clean = custom_rule_clean(data=data, existing=existing)
    channels = clean.pop("channels")
    if existing is not None:
        _close_events(existing.key)  # a changed definition judges afresh
        Route.objects.filter(rule=existing.key).delete()
        for field, value in clean.items():
            setattr(existing, field, value)
        existing.save()
        rule = existing
    else:
        rule = CustomRule.objects.create(**clean)
    routed = [c for c in channels if c.routes.exists()]  # a channel without routes receives it already
    Route.objects.bulk_create(Route(channel=c, rule=rule.key, min_severity=Severity.INFO) for c in routed)
    return rule


@transaction.atomic
def custom_rule_remove(*, name: str) -> CustomRule:
    """Remove the custom rule NAME, its routes, and resolve what it has open (nothing evaluates it any more)."""
    rule = CustomRule.objects.filter(name=name).first()
    if rule is None:
        raise ValidationError(f"no custom rule named '{name}'")
    _close_events(rule.key)
    Route.objects.filter(rule=rule.key).delete()
    rule.delete()
    return rule


@transaction.atomic
def custom_rule_enable(*, name: str, enabled: bool) -> CustomRule:
    """Switch the custom rule NAME on or off; off, the next evaluation resolves what it has open
    (as a built-in rule switched off does), and it stays defined, routes included."""
    updated = CustomRule.objects.filter(name=name).update(enabled=enabled)
    if not updated:
        raise ValidationError(f"no custom rule named '{name}'")
    return CustomRule.objects.get(name=name)


def _close_events(key: str) -> None:
    for event in AlertEvent.objects.filter(rule=key, state__in=AlertEvent.OPEN_STATES):
        finding = Finding(subject=event.subject, active=False, resolution="closed", resolved_by="its rule was changed")
        alert_observe(rule=key, finding=finding, severity=event.severity)


def custom_rule_channels(rule: CustomRule) -> list[str]:
    """The names of the channels routed to RULE (channels without routes receive it too)."""
    return sorted(Route.objects.filter(rule=rule.key).values_list("channel__name", flat=True))


def custom_rule_export(rule: CustomRule) -> dict[str, Any]:
    """RULE as the definition custom_rule_clean reads (the API, `--json`, the configuration export)."""
    return {
        "name": rule.name,
        "scope": rule.scope,
        "engine": rule.engine.name if rule.engine else "",
        "host": rule.host.name if rule.host else "",
        "metric": rule.metric,
        "comparator": rule.comparator,
        "threshold": rule.threshold,
        "for": rule.for_s,
        "severity": rule.severity,
        "channels": custom_rule_channels(rule),
        "enabled": rule.enabled,
    }


def custom_rules_export() -> list[dict[str, Any]]:
    return [custom_rule_export(r) for r in CustomRule.objects.select_related("engine", "host")]


@transaction.atomic
def custom_rules_import(*, rules: object) -> list[CustomRule]:
    """Create or replace (by name) each definition of RULES; all or nothing: the first refused one
    raises ValidationError naming it, and nothing is changed."""
    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        raise ValidationError("custom_rules must be a list of rule definitions")
    done = []
    for i, data in enumerate(rules, start=1):
        existing = CustomRule.objects.filter(name=str(data.get("name", "")).strip()).first()
        try:
            done.append(custom_rule_create(data=data, existing=existing))
        except ValidationError as exc:
            raise ValidationError(f"custom rule {i} ({data.get('name', '?')!s:.40}): {_reasons(exc)}") from None
    return done


def _reasons(exc: ValidationError) -> str:
    if hasattr(exc, "error_dict"):
        return "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in exc.message_dict.items())
    return "; ".join(exc.messages)


def custom_rule_reasons(exc: ValidationError) -> str:
    """One line naming each refused field and why (the CLI's and the API's message)."""
    return _reasons(exc)
