"""Rules raised from elsewhere through services.external_alert_fire/resolve."""
from . import register
from .base import Rule


@register
class BenchmarkRegression(Rule):
    key = "benchmark_regression"
    title = "Benchmark regression"
    severity = "warning"
    signal = "external"
    DEFAULTS = {}
    help = "A scheduled benchmark came out slower than its baseline (raised by the benchmarks module)."
