from datetime import datetime, timedelta
from typing import Any

from django import template
from django.urls import reverse
from django.utils.safestring import SafeString

from dashboard.models import Incident

from ..grammar import format_when
from ..ledgers import human_duration
from ..ledgers import incident_unit as _incident_unit
from ..models import EvidenceLink
from ..render import render_markdown, render_markdown_inline

register = template.Library()


@register.filter
def markdown(text: str | None) -> SafeString:
    return render_markdown(text)


@register.filter
def markdown_inline(text: str | None) -> SafeString:
    """Emphasis and code of one line, inside a link or a cell (the claims page's `**11.2×**`)."""
    return render_markdown_inline(text)


@register.filter
def logdate(value: datetime | None) -> str:
    """The log's own date style: '2026-08-20' or '2026-08-20 09:00'."""
    return format_when(value) if value else ""


# Where evidence that names a row by id links to. reverse() raises on a misspelt URL name, so the
# page crawl (tests/test_crawl.py) catches it instead of the link quietly disappearing.
_EVIDENCE_VIEWS = {"alert_event": "alerts:detail", "benchmark_run": "bench:run"}


@register.filter
def evidence_url(ev: EvidenceLink) -> str:
    """The page EV (an EvidenceLink) points at: its URL, or the alert event's or benchmark run's page."""
    if ev.kind == "url":
        return ev.url
    view = _EVIDENCE_VIEWS.get(ev.kind)
    return reverse(view, args=[ev.ref_id]) if view and ev.ref_id else ""


@register.filter
def incident_unit(incident: Incident) -> str:
    """The unit, else the engine; "—" for a host-level incident (a kernel fault has no engine)."""
    return _incident_unit(incident) or "—"


@register.filter
def duration(delta: timedelta | None) -> str:
    """A timedelta as "1 min 57 s" (str() of one reads "0:01:57.126392")."""
    return human_duration(delta)


@register.filter
def tokens_per_gib(row: Any) -> str:  # a KVPoolEntry, or a planner Row: both have tokens_per_gib
    value = row.tokens_per_gib
    return f"{value:,.0f}" if value is not None else "—"


@register.filter
def gib(num_bytes: float) -> str:
    return f"{num_bytes / 1024**3:.2f}"


@register.filter
def thousands(value: float | None) -> str:
    return "—" if value is None else f"{value:,}"


@register.filter
def num(value: float | None) -> str:
    """10.6 → '10.6', 10.31 → '10.31', 2703604 → '2,703,604' (no trailing zeros)."""
    if value is None:
        return "—"
    text = f"{value:,.2f}".rstrip("0").rstrip(".")
    return text
