"""Read side: the trend of a profile and what the pages list."""

from typing import Any

from sparkops.measured.selectors import trend_annotations

from .models import Run
from .regression import BASELINE_RUNS, METRICS, judge


def profile_trend(*, profile):
    """Done runs of the profile's current hash, oldest first, as chart series; plus annotations."""
    runs = profile.trend_runs("id", "created_at", "stats", "tainted", "regression")
    series: dict[str, Any] = {"t": [], "run": [], "tainted": [], "regression": []}  # the chart's JSON
    for metric in METRICS:
        series[metric] = {"median": [], "min": [], "max": [], "band": _noise_band(runs, metric)}
    for run in runs:
        series["t"].append(run.created_at.isoformat())
        series["run"].append(run.pk)
        series["tainted"].append(run.tainted)
        series["regression"].append(run.regression)
        for metric in METRICS:
            stat = (run.stats or {}).get(metric) or {}
            for key in ("median", "min", "max"):
                series[metric][key].append(stat.get(key))
    series["annotations"] = trend_annotations(profile, runs)
    return series


def _median(run, metric):
    return ((run.stats or {}).get(metric) or {}).get("median")


def _noise_band(runs, metric):
    """The band a next run's median may sit in before the regression check calls it slower: the median
    of the last five comparable runs (untainted, not regressions) ± the check's threshold, max(5 %, 3 ×
    their spread), as regression.judge computes it. None until five such runs exist."""
    comparable = [r for r in reversed(runs) if not r.tainted and not r.regression and _median(r, metric) is not None]
    history = [_median(r, metric) for r in comparable[:BASELINE_RUNS]]
    if len(history) < BASELINE_RUNS:
        return None
    _, detail = judge(history[0], history, METRICS[metric])
    base, threshold = detail["baseline_median"], detail["threshold"]
    return {"low": base - threshold, "high": base + threshold, "runs": [r.pk for r in comparable[:BASELINE_RUNS]]}


def runs_for_compare(*, a, b):
    qs = Run.objects.select_related("engine", "profile").filter(pk__in=[a, b])
    found = {r.pk: r for r in qs}
    return found.get(a), found.get(b)
