from django import template

from ..grammar import format_when
from ..render import render_markdown

register = template.Library()


@register.filter
def markdown(text):
    return render_markdown(text)


@register.filter
def logdate(value):
    """The log's own date style: '2026-08-20' or '2026-08-20 09:00'."""
    return format_when(value) if value else ""


@register.filter
def tokens_per_gib(row):
    value = row.tokens_per_gib
    return f"{value:,.0f}" if value is not None else "—"


@register.filter
def gib(num_bytes):
    return f"{num_bytes / 1024**3:.2f}"


@register.filter
def thousands(value):
    return "—" if value is None else f"{value:,}"


@register.filter
def num(value):
    """10.6 → '10.6', 10.31 → '10.31', 2703604 → '2,703,604' (no trailing zeros)."""
    if value is None:
        return "—"
    text = f"{value:,.2f}".rstrip("0").rstrip(".")
    return text
