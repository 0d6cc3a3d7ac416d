from django import template

from sparkops.probes.contract import ordered
from sparkops.probes.selectors import engine_contract
from sparkops.probes.thinking import ARMS

register = template.Library()


@register.inclusion_tag("probes/_engine_contract.html")
def probe_contract(engine):
    """The engine page's reading of its request contract, from the newest contract probe."""
    run = engine_contract(engine)
    return {"engine": engine, "run": run, "cases": ordered(run.result) if run else []}


@register.filter
def contract_cases(result):
    return ordered(result)


@register.filter
def thinking_arms(result):
    """The thinking probe's arms in the order they were sent."""
    arms = (result or {}).get("arms") or {}
    return [(arm, arms[arm]) for arm in ARMS if arm in arms]
