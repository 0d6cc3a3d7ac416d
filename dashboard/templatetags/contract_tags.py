"""`{% contract_panel engine %}`: the engine page's "request contract (live)" panel, from the
contract part of the engine's last reading (sparkops/collectors/contract.py); no query."""

from datetime import UTC, datetime
from typing import Any

from django import template

from dashboard.models import Engine
from sparkops.collectors.contract import judged_text

register = template.Library()

REASONS = ("stop", "length", "abort", "error", "repetition")


@register.inclusion_tag("dashboard/partials/_contract_live.html")
def contract_panel(engine: Engine) -> dict[str, Any]:
    latest = engine.latest if isinstance(engine.latest, dict) else {}
    contract = latest.get("contract")
    c: dict = contract if isinstance(contract, dict) else {}
    journal = c.get("journal") if isinstance(c.get("journal"), dict) else None
    finished = c.get("finished") or {}
    rows = [(reason, finished.get(reason, 0), (c.get("shares") or {}).get(reason)) for reason in REASONS]
    peg = ((journal or {}).get("last") or {}).get("peg_native")
    return {
        "engine": engine,
        "c": c,
        "kind": engine.kind,
        "rows": rows if c.get("metrics") else [],
        "journal": journal,
        "peg": {**peg, "at": datetime.fromtimestamp(peg["at"], tz=UTC)} if isinstance(peg, dict) else None,
        "window_min": (c.get("window_s") or 0) / 60,
        "edge": _edge(c.get("edge")),
        # SparkOps's own requests are subtracted: whose traffic the figures are (sparkops/collectors/own.py).
        "own": c.get("own") if isinstance(c.get("own"), dict) else None,
        "whose": judged_text(c.get("own")),
    }


def _edge(edge: object) -> str:
    """The edge-of-window figure in words: '8 of 11 prompts over 20,000 tokens (61 % of the 32,768-token window)'."""
    if not isinstance(edge, dict) or not edge.get("prompts"):
        return ""
    text = f"{edge['over']:,.0f} of {edge['prompts']:,.0f} prompts over {edge['bound_tokens']:,} tokens"
    if edge.get("of_window") and edge.get("window_tokens"):
        text += f" ({edge['of_window']:.0%} of the {edge['window_tokens']:,}-token window)".replace("%", " %")
    return text
