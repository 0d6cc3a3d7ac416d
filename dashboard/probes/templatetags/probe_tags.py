from django import template

from dashboard.probes.selectors import engine_contract

register = template.Library()


@register.inclusion_tag("probes/_engine_contract.html")
def probe_contract(engine):
    """The engine page's reading of its request contract, from the newest contract probe."""
    return {"engine": engine, "run": engine_contract(engine)}
