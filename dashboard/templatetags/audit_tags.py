"""`{% audit_badge engine %}`: the engine card's count of failing launch-audit checks, linking to
them. The count comes with the engine's reading (the poller's launch observer audits the box
each time it observes), so a card costs no query for it."""

from typing import Any

from django import template
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from dashboard.models import Engine

register = template.Library()


@register.simple_tag
def audit_badge(engine: Engine) -> SafeString:
    latest = engine.latest if isinstance(engine.latest, dict) else {}
    count, applied = latest.get("audit_failing"), latest.get("audit_applied")
    href = reverse("engine-audit", args=[engine.name]) if count or applied else ""
    failing = (
        format_html(
            '<a class="badge audit-fail" href="{}" title="launch audit: failing checks">audit: {} failing</a>',
            href,
            count,
        )
        if count
        else ""
    )
    waiting = (
        format_html(
            '<a class="badge audit-warn" href="{}" title="fixes in the unit, not yet in what runs">'
            "audit: {} applied, takes effect at the next restart</a>",
            href,
            applied,
        )
        if applied
        else ""
    )
    return format_html("{}{}", failing, waiting)


@register.inclusion_tag("dashboard/partials/_restart_budget.html")
def restart_budget_table(engine: Engine) -> dict[str, Any]:
    """The engine's cold and warm starts (median, min, max, dates) against its budgets."""
    from sparkops.launch.starts import restart_budget

    return {"engine": engine, "budget": restart_budget(engine)}
