"""Formatting for the live cards."""

import math

from django import template

register = template.Library()
GIB = 1024**3


def _number(value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number  # NaN reads as "no value"


@register.filter
def pct(value, digits=0):
    """0.923 -> "92 %"; a missing value -> "—"."""
    number = _number(value)
    return "—" if number is None else f"{number * 100:.{int(digits)}f} %"


@register.filter
def num(value, digits=1):
    number = _number(value)
    return "—" if number is None else f"{number:,.{int(digits)}f}"


@register.filter
def gib(value, digits=1):
    number = _number(value)
    return "—" if number is None else f"{number / GIB:,.{int(digits)}f} GiB"


@register.filter
def ms(value):
    """Seconds -> "123 ms"."""
    number = _number(value)
    return "—" if number is None else f"{number * 1000:,.0f} ms"


@register.filter
def ratio(value, whole):
    """value/whole as a 0–100 width for a bar; 0 when either is missing."""
    a, b = _number(value), _number(whole)
    return 0 if not a or not b else max(0, min(100, round(a / b * 100)))


@register.inclusion_tag("dashboard/partials/_unit_fix.html")
def unit_fix(engine):
    """A down card's fix: the unit's commands to copy, and the Restart form where the box allows it
    (shown to admins only; the card is pushed alike to every browser, the server checks the role)."""
    from dashboard.unit_actions import can_restart, fix_commands

    return {"engine": engine, "commands": fix_commands(engine), "restartable": can_restart(engine)}
