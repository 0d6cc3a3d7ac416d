"""Read side: a profile's trend (a score per run, with change-log marks), the needle table over runs,
and the latest contract reading of an engine (its page shows it)."""

from typing import Any

from sparkops.measured.selectors import trend_annotations

from .models import ProbeRun


def run_score(run):
    """0–1: the share of the probe's cells or repetitions that were good (the trend's y)."""
    r = run.result or {}
    if run.kind == "needle":
        cells = [c for row in r.get("rows", []) if not row["control"] for c in row["cells"].values()]
        return sum(c["verdict"] == "HIT" for c in cells) / len(cells) if cells else None
    if run.kind == "soak":
        n = len(r.get("generated") or [])
        return (n - r.get("degenerate", 0)) / n if n else None
    if run.kind == "tool":
        return r["raw_valid"] / r["n"] if r.get("n") else None
    return None if run.passed is None else float(run.passed)


def profile_trend(*, profile):
    runs = profile.trend_runs("id", "created_at", "kind", "result", "passed", "tainted", "regression", "headline")
    series: dict[str, Any] = {
        "t": [],
        "run": [],
        "score": [],
        "coerced": [],
        "headline": [],
        "tainted": [],
        "regression": [],
    }
    for run in runs:
        series["t"].append(run.created_at.isoformat())
        series["run"].append(run.pk)
        series["score"].append(run_score(run))
        n = (run.result or {}).get("n")
        series["coerced"].append(run.result["coerced_valid"] / n if run.kind == "tool" and n else None)
        series["headline"].append(run.headline)
        series["tainted"].append(run.tainted)
        series["regression"].append(run.regression)
    series["annotations"] = trend_annotations(profile, runs)
    return series


def needle_table(*, profile, limit=20):
    """The needle table of docs/field-notes.md §14 over runs: tokens × depth, seconds per case; newest first."""
    rows = []
    runs = ProbeRun.objects.filter(profile=profile, kind="needle", status=ProbeRun.Status.DONE)
    for run in runs.order_by("-created_at")[:limit]:
        for row in (run.result or {}).get("rows", []):
            rows.append({"run": run, **row})
    return rows


def engine_contract(engine):
    """The newest done contract probe of ENGINE, or None."""
    return (
        ProbeRun.objects.filter(engine=engine, kind="contract", status=ProbeRun.Status.DONE)
        .order_by("-created_at")
        .first()
    )
