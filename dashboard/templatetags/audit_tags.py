"""`{% audit_badge engine %}`: the engine card's count of failing launch-audit checks, linking to
them. The count comes with the engine's reading (the poller's launch observer audits the box
each time it observes), so a card costs no query for it."""

from django import template
from django.urls import reverse
from django.utils.html import format_html

register = template.Library()


@register.simple_tag
def audit_badge(engine):
    count = (engine.latest or {}).get("audit_failing") if isinstance(engine.latest, dict) else None
    if not count:
        return ""
    return format_html(
        '<a class="badge audit-fail" href="{}" title="launch audit: failing checks">audit: {} failing</a>',
        reverse("engine-audit", args=[engine.name]),
        count,
    )


@register.inclusion_tag("dashboard/partials/_restart_budget.html")
def restart_budget_table(engine):
    """The engine's cold and warm starts (median, min, max, dates) against its budgets."""
    from dashboard.launch.starts import restart_budget

    return {"engine": engine, "budget": restart_budget(engine)}
