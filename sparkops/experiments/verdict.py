"""An experiment's verdict: whether the arms differ by exactly the flags under test
(`arm_difference`), and the summary the page and `sparkops bench ab --json` show, its figures
the ratio of medians B / A with a bootstrap interval (`stats.verdict`) over each arm's valid,
finished repetitions."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from sparkops.benchmarks.cells import cell_figures
from sparkops.benchmarks.models import Run
from sparkops.launch.changelog import diff as config_diff

from . import stats
from .models import MIN_REPS, Experiment, Slot

if TYPE_CHECKING:
    from dashboard.models import ConfigSnapshot, Engine


def _baselines(experiment: Experiment) -> dict[str, ConfigSnapshot | None]:
    out = {}
    for slot in experiment.slots.select_related("snapshot_a", "snapshot_b").order_by("order"):
        if slot.arm not in out and slot.run_id is not None:
            out[slot.arm] = slot.snapshot()
    return out


def _port(engine: Engine) -> int | None:

    try:
        return urlsplit(engine.url).port
    except ValueError:
        return None


def _only_the_address(experiment: Experiment, a_value: str, b_value: str) -> bool:
    """Whether two side-by-side units' values differ only by each one's own port or name (two
    units cannot listen on one port: that difference is the setup, not the variant)."""
    pa, pb = _port(experiment.engine_a), _port(experiment.engine_b)
    if pa is None or pb is None:
        return False
    b_as_a = b_value.replace(str(pb), str(pa)).replace(experiment.engine_b.name, experiment.engine_a.name)
    return b_as_a == a_value


def arm_difference(*, experiment: Experiment) -> dict[str, Any]:
    """The configuration difference between the arms' first snapshots, and whether it is exactly
    the flags the experiment names: {lines, names, expected, ignored, warnings, exact}."""
    snaps = _baselines(experiment)
    expected = list(experiment.flags or [])
    warnings = []
    for arm in "AB":
        if arm in snaps and snaps[arm] is None:
            warnings.append(
                f"Arm {arm} ({experiment.engine(arm).name}) has no configuration snapshot SparkOps could read "
                "(its unit could not be read, or no process serves a hand-run engine): the variant is not verified."
            )
    a, b = snaps.get("A"), snaps.get("B")
    if a is None or b is None:
        return {"lines": [], "names": [], "expected": expected, "ignored": [], "warnings": warnings, "exact": False}
    lines, ignored = [], []
    for n, o, v, origin in config_diff(a.data or {}, b.data or {}):
        if experiment.mode == Experiment.Mode.SIDE_BY_SIDE and _only_the_address(experiment, o, v):
            ignored.append(n)
        else:
            lines.append({"name": n, "a": o, "b": v, "origin": origin})
    names = sorted({line["name"] for line in lines})
    if not lines:
        warnings.append("The arms' configurations are the same: this compares an engine with itself.")
    elif names != sorted(expected):
        extra = [n for n in names if n not in expected]
        missing = [n for n in expected if n not in names]
        parts = []
        if extra:
            parts.append("they also differ in " + ", ".join(extra))
        if missing:
            parts.append("they do not differ in " + ", ".join(missing))
        named = ", ".join(expected) or "no flags"
        warnings.append(
            f"The arms do not differ by exactly the flags this experiment names ({named}): {'; '.join(parts)}."
        )
    return {
        "lines": lines,
        "names": names,
        "expected": expected,
        "ignored": ignored,
        "warnings": warnings,
        "exact": bool(lines) and names == sorted(expected),
    }


# --- the figures ------------------------------------------------------------------------------------


def _figure(run: Run, key: str) -> float | None:
    return ((run.stats or {}).get(key) or {}).get("median")


def _quality(slots, probe_run):
    """Pass count (repetitions whose run finished with no failed check, of those that ran) and the
    quality probe's result when the experiment has one."""
    ran = [s for s in slots if s.run is not None and s.run.status not in (Run.Status.QUEUED, Run.Status.RUNNING)]
    passed = [s for s in ran if s.run.status == Run.Status.DONE and not any(c.get("ok") is False for c in s.run.checks)]
    out = {"passed": len(passed), "of": len(ran), "what": "repetitions that finished with every check passed"}
    if probe_run is not None:
        probe_run.refresh_from_db()
        out["probe"] = {
            "run": probe_run.pk,
            "kind": probe_run.kind,
            "status": probe_run.status,
            "passed": probe_run.passed,
            "headline": probe_run.headline or probe_run.reason,
        }
    return out


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def experiment_summary(*, experiment):
    """Everything the page and `sparkops bench ab --json` show: arms, difference, slots, verdict."""
    slots = list(
        experiment.slots.select_related("run", "snapshot_a", "snapshot_b").prefetch_related("run__repetitions")
    )
    counted = {
        arm: [s for s in slots if s.arm == arm and s.valid and s.run and s.run.status == Run.Status.DONE]
        for arm in "AB"
    }
    # Each repetition read as a sweep cell (benchmarks/cells.py): aggregate and per-stream decode, TTFT.
    cells = {s.pk: cell_figures(s.run.repetitions.all()) for arm in "AB" for s in counted[arm]}
    values = {
        "decode_tokens_per_s": {a: [cells[s.pk]["per_stream_decode_tokens_per_s"] for s in counted[a]] for a in "AB"},
        "ttft_ms": {a: [cells[s.pk]["ttft_ms"] for s in counted[a]] for a in "AB"},
        "total_ms": {a: [_figure(s.run, "total_ms") for s in counted[a]] for a in "AB"},
    }
    figures = stats.verdict(values, seed=experiment.seed)
    arms = {}
    for arm in "AB":
        arm_slots = [s for s in slots if s.arm == arm]
        arms[arm] = {
            "engine": experiment.engine(arm).name,
            "aggregate_decode_tokens_per_s": _median(
                cells[s.pk]["aggregate_decode_tokens_per_s"] for s in counted[arm]
            ),
            "per_stream_decode_tokens_per_s": figures["decode_tokens_per_s"]["median_" + arm.lower()],
            "ttft_ms": figures["ttft_ms"]["median_" + arm.lower()],
            "total_ms": figures["total_ms"]["median_" + arm.lower()],
            "reps_counted": len(counted[arm]),
            "reps_invalid": sum(1 for s in arm_slots if not s.valid),
            "reps_total": len(arm_slots),
            "quality": _quality(arm_slots, experiment.probe_run(arm)),
        }
    enough = all(len(counted[arm]) >= MIN_REPS for arm in "AB")
    return {
        "experiment": experiment.pk,
        "name": experiment.name,
        "mode": experiment.mode,
        "workload": experiment.workload,
        "workload_hash": experiment.workload_hash,
        "flags": experiment.flags,
        "arms": arms,
        "difference": arm_difference(experiment=experiment),
        "figures": figures,
        "ratio": {k: f["ratio"] for k, f in figures.items()},
        "ci_low": {k: f["ci_low"] for k, f in figures.items()},
        "ci_high": {k: f["ci_high"] for k, f in figures.items()},
        "verdict": {k: f["verdict"] for k, f in figures.items()},
        "method": method_text(experiment),
        "enough": enough,
        "enough_reason": "" if enough else f"fewer than {MIN_REPS} valid, finished repetitions in an arm: no verdict",
        "slots": [_slot_row(s) for s in slots],
    }


def method_text(experiment: Experiment) -> str:
    return (
        f"Ratio of medians B / A over each arm's valid repetitions; 95 % percentile bootstrap interval "
        f"({stats.RESAMPLES} resamples, seed {experiment.seed}), widened by {stats.RESOLUTION:.1%} each side for the "
        f"harness's resolution; a word only when the interval excludes 1 "
        f"and the ratio is at least {stats.MIN_EFFECT:.0%} from it. Lower is better for TTFT and total time."
    )


def _slot_row(slot: Slot) -> dict[str, Any]:
    run = slot.run
    snap = slot.snapshot()
    return {
        "order": slot.order + 1,
        "arm": slot.arm,
        "run": run.pk if run else None,
        "status": run.status if run else "pending",
        "reason": run.reason if run else "",
        "tainted": bool(run and run.tainted),
        "decode_tokens_per_s": _figure(run, "decode_tokens_per_s") if run else None,
        "ttft_ms": _figure(run, "ttft_ms") if run else None,
        "total_ms": _figure(run, "total_ms") if run else None,
        "snapshot": snap.pk if snap else None,
        "snapshot_hash": snap.hash[:10] if snap else None,
        "valid": slot.valid,
        "invalid_reason": slot.invalid_reason,
    }
