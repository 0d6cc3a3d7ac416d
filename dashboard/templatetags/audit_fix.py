"""`{{ result|fix_links:engine }}`: the audit table's "Preview the drop-in" link(s) for a finding that is
not a pass. A finding about one engine links its unit-fix page; a pair's ("a + b", e.g.
cold_starts_serialized) links the page of the engine being audited, or on the host's page each
engine of the pair, so the host's audit offers every drop-in its engines' pages do. "box" has none."""

from typing import Any

from django import template
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

register = template.Library()
BOX = "box"


def _link(name: str, text: str) -> SafeString:
    return format_html('<a class="unit-fix-link" href="{}">{}</a>', reverse("engine-unit-fix", args=[name]), text)


@register.filter
def fix_links(result: Any, engine: Any = None) -> SafeString | str:
    if result.status == "pass" or result.subject == BOX:
        return ""
    names = str(result.subject).split(" + ")
    if len(names) == 1:
        return _link(names[0], "Preview the drop-in")
    if engine:
        return _link(engine.name, "Preview the drop-in")
    each = format_html_join(" · ", "{}", ((_link(n, n),) for n in names))
    return format_html("Preview the drop-in: {}", each)
