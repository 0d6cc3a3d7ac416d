"""Rules of the quality module (registered on import by rules/__init__.py)."""

from typing import Any, ClassVar

from . import register
from .base import Rule


@register
class QualityRegression(Rule):
    key = "quality_regression"
    title = "Quality regression"
    severity = "warning"
    signal = "external"
    DEFAULTS: ClassVar[dict[str, Any]] = {}
    help = (
        "A scheduled quality probe got worse than its last good run: a needle HIT became DECOY or MISS at a "
        "depth, a soak degenerated, tool calls stopped validating, a thinking setting turned inert or inverted. "
        "Resolved by the next good run of the same probe (raised by sparkops/probes/regression.py)."
    )
