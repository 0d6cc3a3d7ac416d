"""The audit checks' editable thresholds: their defaults, typed and bounded values from an
operator (the audit page, `sparkops audit --set`), a box's stored values, and those in force."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import User
from django.db import transaction

from dashboard.bounds import Bounds

from .checks import CHECKS

STRING_MAX = 200
TYPE_NAMES = {int: "a whole number", float: "a number", str: "text"}
Value = int | float | str  # a threshold's value: its default's type
Overrides = dict[str, dict[str, Any]]  # {check: {threshold: value}}: each its default's type (Value)

if TYPE_CHECKING:
    from dashboard.models import Host


def thresholds() -> list[tuple[str, str, Value, Bounds | None]]:
    """[(check key, threshold, default, its Bounds or None)] of every check, in order."""
    return [(k, f, d, c.BOUNDS.get(f)) for k, c in CHECKS.items() for f, d in c.DEFAULTS.items()]


def threshold_value(key: str | None, field: str | None, raw: object) -> Value:
    """RAW (text, or a number) as threshold FIELD of check KEY: its default's type, within its
    bounds; ValueError with a sentence an operator can act on."""
    if key not in CHECKS or field not in CHECKS[key].DEFAULTS:
        known = ", ".join(f"{k}.{f}" for k, f, _, _ in thresholds())
        raise ValueError(f"{key}.{field} is not a threshold; thresholds: {known}")
    default, bounds = CHECKS[key].DEFAULTS[field], CHECKS[key].BOUNDS.get(field)
    kind = type(default)
    text = str(raw).strip()
    if kind is str:
        if not text or len(text) > STRING_MAX:
            raise ValueError(f"{field} takes text of 1 to {STRING_MAX} characters")
        if field == "cuda_bin" and not text.startswith("/"):
            raise ValueError(f"{field} is an absolute directory, e.g. /usr/local/cuda/bin")
        return text
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"{field} takes {TYPE_NAMES[kind]} (got {text!r})") from None
    if kind is float and math.isnan(value):
        raise ValueError(f"{field} takes {TYPE_NAMES[kind]} (got {text!r})")
    if bounds and not bounds.holds(value):
        raise ValueError(f"{field} must be between {bounds.low:g} and {bounds.high:g} (got {value:g})")
    return value


def parse_overrides(pairs: Iterable[str] | None) -> Overrides:
    """['compile_caps.max_jobs=8'] → {'compile_caps': {'max_jobs': 8}}; ValueError names a bad one."""
    out: Overrides = {}
    for pair in pairs or ():
        name, sep, raw = pair.partition("=")
        key, dot, field = name.partition(".")
        if not sep or not dot or key not in CHECKS or field not in CHECKS[key].DEFAULTS:
            known = ", ".join(f"{k}.{f}" for k, c in CHECKS.items() for f in c.DEFAULTS)
            raise ValueError(f"{pair!r} is not CHECK.THRESHOLD=VALUE; thresholds: {known}")
        try:
            value = threshold_value(key, field, raw)
        except ValueError as exc:
            raise ValueError(f"{pair!r}: {exc}") from None
        out.setdefault(key, {})[field] = value
    return out


def stored_overrides(host_id: int) -> Overrides:
    """The box's stored thresholds as overrides ({check: {threshold: value}}). A stored value the
    code no longer takes (a check renamed, bounds narrowed) is left out, and its check runs on its
    default: an old row never breaks the audit."""
    from dashboard.models import AuditThreshold

    out: Overrides = {}
    for row in AuditThreshold.objects.filter(host_id=host_id):
        try:
            out.setdefault(row.check_key, {})[row.name] = threshold_value(row.check_key, row.name, row.value)
        except ValueError:
            continue
    return out


def thresholds_save(*, host: Host, values: Mapping[tuple[str, str], object], user: User | None = None) -> list[str]:
    """Store VALUES ({(check, threshold): typed value}) for HOST: a value equal to its default
    removes the row (the box follows the default again). All or nothing; returns the changed keys."""

    from dashboard.models import AuditThreshold

    changed = []
    with transaction.atomic():
        current = {(r.check_key, r.name): r for r in AuditThreshold.objects.select_for_update().filter(host=host)}
        for (key, field), raw in values.items():
            value = threshold_value(key, field, raw)
            row = current.get((key, field))
            if value == CHECKS[key].DEFAULTS[field]:
                if row is not None:
                    row.delete()
                    changed.append(f"{key}.{field}")
                continue
            if row is None:
                AuditThreshold.objects.create(host=host, check_key=key, name=field, value=str(value), updated_by=user)
            elif row.value != str(value):
                row.value, row.updated_by = str(value), user
                row.save(update_fields=["value", "updated_by", "updated_at"])
            else:
                continue
            changed.append(f"{key}.{field}")
    return changed


def effective_thresholds(host_id: int | None, overrides: Mapping[str, Any] | None = None) -> Overrides:
    """{check: {threshold: value}} in force for a box: defaults, then its stored values, then OVERRIDES."""
    stored = stored_overrides(host_id) if host_id is not None else {}
    return {
        key: {**c.DEFAULTS, **stored.get(key, {}), **((overrides or {}).get(key) or {})} for key, c in CHECKS.items()
    }
