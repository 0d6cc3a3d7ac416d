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


@register
class ConfigDrift(Rule):
    key = "config_drift"
    title = "Configuration drift"
    severity = "warning"
    signal = "external"
    DEFAULTS = {}
    help = ("After a restart, the running value of a flag disagrees with the newest flag line a person wrote for the "
            "engine in the change log; names the flag, both values and the file that set the running one (raised "
            "by dashboard/services/launchconfig.py).")
