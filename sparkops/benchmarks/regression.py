"""Regression detection: a scheduled run slower than the median of the last five runs
(same profile, same params hash, done, untainted and not themselves regressions, so a
lasting slowdown keeps alerting instead of becoming the new normal) by more than max(5 %, 3 × their
spread) fires the benchmark_regression alert. This also catches the slow GPU state
whose clocks look normal."""

import logging
import statistics
from typing import Any

from sparkops.measured.conditions import REGRESSION_RULE

from .models import Run

log = logging.getLogger(__name__)
BASELINE_RUNS = 5
MIN_SHARE = 0.05
SPREAD_FACTOR = 3
# metric -> +1 when higher is better, -1 when lower is better
METRICS = {"decode_tokens_per_s": +1, "ttft_ms": -1}


def _median_of(run, metric):
    return ((run.stats or {}).get(metric) or {}).get("median")


def baseline_runs(run):
    qs = Run.objects.filter(
        profile=run.profile,
        params_hash=run.params_hash,
        status=Run.Status.DONE,
        tainted=False,
        regression=False,
        created_at__lt=run.created_at,
    ).exclude(pk=run.pk)
    return list(qs.order_by("-created_at")[:BASELINE_RUNS])


def judge(value, history, direction):
    """(regressed, detail) of VALUE against HISTORY (one median per earlier run)."""
    base = statistics.median(history)
    spread = max(history) - min(history)
    threshold = max(MIN_SHARE * abs(base), SPREAD_FACTOR * spread)
    slower_by = (base - value) if direction > 0 else (value - base)
    return slower_by > threshold, {
        "value": value,
        "baseline_median": base,
        "spread": spread,
        "threshold": threshold,
        "slower_by": slower_by,
    }


def regression_check(*, run):
    """Judge a finished scheduled run; fire or resolve the alert. Returns the detail dict."""
    if run.status != Run.Status.DONE or run.profile is None or run.tainted:
        return {}
    base_runs = baseline_runs(run)
    if len(base_runs) < BASELINE_RUNS:
        detail: dict[str, Any] = {"skipped": f"baseline has {len(base_runs)} comparable runs; {BASELINE_RUNS} needed"}
        Run.objects.filter(pk=run.pk).update(regression_detail=detail)
        return detail
    detail, regressed = {"baseline_runs": [r.pk for r in base_runs]}, []
    for metric, direction in METRICS.items():
        value, history = _median_of(run, metric), [_median_of(r, metric) for r in base_runs]
        if value is None or any(h is None for h in history):
            continue
        hit, detail[metric] = judge(value, history, direction)
        if hit:
            regressed.append(metric)
    run.regression, run.regression_detail = bool(regressed), {**detail, "regressed": regressed}
    run.save(update_fields=["regression", "regression_detail"])
    _notify(run, regressed)
    return run.regression_detail


def _subject(run):
    return f"benchmark {run.profile.name}"


def _notify(run, regressed):
    try:
        from sparkops.alerts.services import external_alert_fire, external_alert_resolve
    except ImportError:  # alert engine not installed: the run still carries the flag
        log.warning("benchmark regression on run %s not alerted: alerts API missing", run.pk)
        return
    if not regressed:
        external_alert_resolve(rule=REGRESSION_RULE, engine=run.engine, subject=_subject(run))
        return
    parts = []
    for metric in regressed:
        d = run.regression_detail[metric]
        parts.append(
            f"{metric} {d['value']:.1f} vs median {d['baseline_median']:.1f} of the last "
            f"{BASELINE_RUNS} (threshold {d['threshold']:.1f})"
        )
    external_alert_fire(
        rule=REGRESSION_RULE,
        severity="warning",
        engine=run.engine,
        subject=_subject(run),
        message=f"{run.profile.name} on {run.engine.name} regressed: " + "; ".join(parts),
        cause=f"benchmark run {run.pk}",
    )
