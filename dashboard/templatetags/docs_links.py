"""Links from the dashboard into its manual (served at /docs/, dashboard/views/docs.py): each
alert rule and cause to its section of docs/alerts.md, each audit check to docs/audit.md.
tests/test_docs.py holds every rule, cause and check to having that section."""

from typing import Any

from django import template
from django.urls import reverse

from .alert_text import cause_now

register = template.Library()


@register.simple_tag
def docs_url(page: str, anchor: str = "") -> str:
    """/docs/PAGE/#ANCHOR, as MkDocs lays the site out (a directory per page)."""
    url = reverse("docs-page", kwargs={"path": f"{page}/"})
    return f"{url}#{anchor}" if anchor else url


@register.simple_tag
def docs_alert_url(event: Any) -> str:
    """The section of docs/alerts.md that explains EVENT: an engine_down by its cause (each cause has
    its own), a rule of the operator's own by the custom rules', any other by its rule (its cause is a
    detail of that rule: `kv_full` of kv_saturated)."""
    rule = getattr(event, "rule", "") or ""
    if rule == "engine_down":
        return docs_url("alerts", cause_now(event) or rule)
    if rule.startswith("custom."):
        return docs_url("alerts", "custom-rules")
    return docs_url("alerts", rule)
