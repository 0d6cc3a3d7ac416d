"""Rules raised from elsewhere through services.external_alert_fire/resolve."""

from typing import Any, ClassVar

from . import register
from .base import Rule


@register
class BenchmarkRegression(Rule):
    key = "benchmark_regression"
    title = "Benchmark regression"
    severity = "warning"
    signal = "external"
    DEFAULTS: ClassVar[dict[str, Any]] = {}
    help = "A scheduled benchmark came out slower than its baseline (raised by the benchmarks module)."


@register
class ConfigDrift(Rule):
    key = "config_drift"
    title = "Configuration drift"
    severity = "warning"
    signal = "external"
    DEFAULTS: ClassVar[dict[str, Any]] = {}
    help = (
        "After a restart, the running value of a flag disagrees with the newest flag line a person wrote for the "
        "engine in the change log; names the flag, both values and the file that set the running one (raised "
        "by sparkops/launch/drift.py)."
    )


@register
class StartOverBudget(Rule):
    key = "start_over_budget"
    title = "Start over its budget"
    severity = "warning"
    signal = "external"
    DEFAULTS: ClassVar[dict[str, Any]] = {}
    help = (
        "An engine's start (unit start to first healthy answer) took longer than its readiness helper's budget, "
        "or than TimeoutStartSec without one (raised by sparkops/launch/starts.py)."
    )


@register
class ColdStartsOverlap(Rule):
    key = "cold_starts_overlap"
    title = "Cold starts at once"
    severity = "warning"
    signal = "external"
    DEFAULTS: ClassVar[dict[str, Any]] = {}
    help = (
        "Two engines of one box were in a cold start (compilers running) at the same time: two compile storms "
        "do not fit in one box (raised by sparkops/launch/starts.py)."
    )
