"""Formatting for the live cards."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from django import template

if TYPE_CHECKING:
    from dashboard.models import Engine

register = template.Library()
GIB = 1024**3


def _number(value: Any) -> float | None:  # whatever a template hands a filter
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number  # NaN reads as "no value"


@register.filter
def pct(value: object, digits: int | str = 0) -> str:
    """0.923 -> "92 %"; a missing value -> "—"."""
    number = _number(value)
    return "—" if number is None else f"{number * 100:.{int(digits)}f} %"


@register.filter
def num(value: object, digits: int | str = 1) -> str:
    number = _number(value)
    return "—" if number is None else f"{number:,.{int(digits)}f}"


@register.filter
def gib(value: object, digits: int | str = 1) -> str:
    number = _number(value)
    return "—" if number is None else f"{number / GIB:,.{int(digits)}f} GiB"


@register.filter
def ms(value: object) -> str:
    """Seconds -> "123 ms"."""
    number = _number(value)
    return "—" if number is None else f"{number * 1000:,.0f} ms"


@register.filter
def ratio(value: object, whole: object) -> int:
    """value/whole as a 0–100 width for a bar; 0 when either is missing."""
    a, b = _number(value), _number(whole)
    return 0 if not a or not b else max(0, min(100, round(a / b * 100)))


@register.inclusion_tag("dashboard/partials/_unit_fix.html")
def unit_fix(engine: Engine) -> dict[str, Any]:
    """A down card's fix: the unit's commands to copy, and the Restart form where the box allows it
    (shown to admins only; the card is pushed alike to every browser, the server checks the role)."""
    from dashboard.unit_actions import can_restart, fix_commands

    return {"engine": engine, "commands": fix_commands(engine), "restartable": can_restart(engine)}
