from django import template

from dashboard.probes.contract import ordered
from dashboard.probes.selectors import engine_contract

register = template.Library()


@register.inclusion_tag("probes/_engine_contract.html")
def probe_contract(engine):
    """The engine page's reading of its request contract, from the newest contract probe."""
    run = engine_contract(engine)
    return {"engine": engine, "run": run, "cases": ordered(run.result) if run else []}


@register.filter
def contract_cases(result):
    return ordered(result)
