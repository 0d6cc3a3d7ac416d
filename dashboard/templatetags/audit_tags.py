"""`{% audit_badge engine %}`: the engine card's count of failing launch-audit checks, linking to them.

A card is rendered on every live push, so the count is kept per process for BADGE_TTL_S."""
import time

from django import template
from django.urls import reverse
from django.utils.html import format_html

register = template.Library()
BADGE_TTL_S = 60.0
_cache: dict[int, tuple[float, int]] = {}


def failing_checks(engine):
    now = time.monotonic()
    hit = _cache.get(engine.pk)
    if hit and now - hit[0] < BADGE_TTL_S:
        return hit[1]
    from dashboard.models import Engine
    from dashboard.services import audit

    engines = list(Engine.objects.filter(host_id=engine.host_id, retired_at__isnull=True))
    count = sum(r.status == "fail" for r in audit.audit(engines, only_engine=engine))
    _cache[engine.pk] = (now, count)
    return count


@register.simple_tag
def audit_badge(engine):
    try:
        count = failing_checks(engine)
    except Exception:  # a card renders whatever the audit's trouble
        return ""
    if not count:
        return ""
    return format_html('<a class="badge audit-fail" href="{}" title="launch audit: failing checks">audit: {} failing</a>',
                       reverse("engine-audit", args=[engine.name]), count)


@register.inclusion_tag("dashboard/partials/_restart_budget.html")
def restart_budget_table(engine):
    """The engine's cold and warm starts (median, min, max, dates) against its budgets."""
    from dashboard.services.launchconfig import restart_budget

    return {"engine": engine, "budget": restart_budget(engine)}
