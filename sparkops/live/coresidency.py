"""Co-residency: two engines' decode rates on one chart, with the periods when both were
generating shaded and each engine's mean rate alone vs. together (the penalty)."""

from bisect import bisect_right
from datetime import datetime, timedelta
from statistics import fmean
from typing import Any, TypedDict

from dashboard.models import Engine

from .chartdata import Trace, annotations, fetch_points, trace
from .ranges import TimeRange

GENERATING_TOK_S = 1.0  # below this an engine is idle, not "slow"
Intervals = list[tuple[datetime, datetime]]


class Penalty(TypedDict):
    """An engine's mean decode rate alone and beside the other, and how much it loses (%)."""

    alone: float | None
    together: float | None
    penalty_pct: float | None


def generating_intervals(trace: Trace, threshold: float = GENERATING_TOK_S) -> Intervals:
    """[(start, end)] datetimes where the rate was above THRESHOLD (a point holds until the next)."""
    ts = [datetime.fromisoformat(t) for t in trace["t"]]
    out: list[tuple[datetime, datetime]] = []
    for i, y in enumerate(trace["y"]):
        if y is None or y < threshold:
            continue
        # The newest point holds for one more step, as every earlier point does.
        end = ts[i + 1] if i + 1 < len(ts) else ts[i] + (ts[i] - ts[i - 1] if i else timedelta(0))
        if out and out[-1][1] >= ts[i]:
            out[-1] = (out[-1][0], end)
        else:
            out.append((ts[i], end))
    return out


def intersect(a: Intervals, b: Intervals) -> Intervals:
    out: Intervals = []
    i, j = 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _inside(moment: datetime, intervals: Intervals, starts: list[datetime]) -> bool:
    k = bisect_right(starts, moment) - 1
    return k >= 0 and intervals[k][0] <= moment < intervals[k][1]


def rate_alone_vs_together(trace: Trace, both: Intervals) -> Penalty:
    starts = [s for s, _ in both]
    alone: list[float] = []
    together: list[float] = []
    for t, y in zip(trace["t"], trace["y"]):
        if y is None or y < GENERATING_TOK_S:
            continue
        (together if _inside(datetime.fromisoformat(t), both, starts) else alone).append(y)
    mean_alone = fmean(alone) if alone else None
    mean_together = fmean(together) if together else None
    penalty = (1 - mean_together / mean_alone) * 100 if mean_alone and mean_together is not None else None
    return {"alone": mean_alone, "together": mean_together, "penalty_pct": penalty}


def coresidency_chart(*, a: Engine, b: Engine, rng: TimeRange) -> dict[str, Any]:
    metric = "generation_tokens_per_s"
    traces = [trace(f"engine.{e.id}", fetch_points(e, [metric], rng)[metric], metric, e.name, 1) for e in (a, b)]
    both = intersect(generating_intervals(traces[0]), generating_intervals(traces[1]))
    panel = {"id": "coresidency", "title": "Decode tokens / s", "tickformat": "", "traces": traces}
    notes = {n["id"]: n for e in (a, b) for n in annotations(rng=rng, engine=e)}
    return {
        "range": rng.as_dict(),
        "panels": [panel],
        "annotations": sorted(notes.values(), key=lambda n: n["time"]),
        "alerts": [],
        "restarts": [],
        "shaded": [{"start": s.isoformat(), "end": e.isoformat(), "title": "both generating"} for s, e in both],
        "stats": {e.name: rate_alone_vs_together(tr, both) for e, tr in zip((a, b), traces)},
    }
