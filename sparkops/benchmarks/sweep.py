"""Sweeps: one axis (concurrency or depth), everything else fixed and hashed, one run per cell
in order, each with the per-run methodology of services.run_execute (warm-up, checks, pinned
output, buckets, taint). Each cell is read by cells.cell_figures.

A sweep stops early, and says why, when
- a cell was refused or every request of it failed (its run says why);
- a cell's failed share of requests passes the sweep's error threshold;
- (concurrency) a cell saturates: aggregate decode rose by less than SATURATION_GAIN over the
  previous cell while the TTFT median grew at least LINEAR_SHARE as fast as the concurrency did
  (a queue forming in front of a full batch, "climbing linearly": docs/field-notes.md §12)."""

from __future__ import annotations

import itertools
from datetime import timedelta

from django.template.loader import render_to_string
from django.utils import timezone

from dashboard.livebus import GROUP_ALL, LiveEvent, publish_on_commit

from .bounds import spec_problems
from .cells import cell_figures
from .hashing import HASH_FIELDS, PROMPT_VERSION, stable_hash
from .models import MAX_CONCURRENCY, MAX_DEPTH, MAX_OUTPUT, MAX_REPS, Run, Sweep
from .services import run_create, run_execute
from .spec import RunSpec
from .sweep_export import chart_data

MAX_CELLS = 16
STALE_IDLE_S = 900  # between two cells a sweep has none running for milliseconds, never minutes
SATURATION_GAIN = 0.05
LINEAR_SHARE = 0.5
AXIS_MAX = {"concurrency": MAX_CONCURRENCY, "depth": MAX_DEPTH}


class SweepError(ValueError):
    """Bad sweep parameters: the message says which and nothing was created."""


def parse_values(text, *, axis):
    """'1,2,4,8' -> [1, 2, 4, 8] for AXIS, or SweepError saying what is wrong."""
    if axis not in AXIS_MAX:
        raise SweepError(f"the axis is concurrency or depth, not {axis!r}")
    parts = [p.strip() for p in str(text).replace(" ", ",").split(",") if p.strip()]
    if not parts:
        raise SweepError(f"give the {axis} values, e.g. " + ("1,2,4,8" if axis == "concurrency" else "0,4096,16384"))
    values = []
    for p in parts:
        try:
            values.append(int(p))
        except ValueError:
            raise SweepError(f"{axis} value {p!r} is not a whole number") from None
    return values


def sweep_validate(*, axis, values, spec: RunSpec):
    """Every reason to refuse the sweep before anything runs, joined; None when it may run."""
    low = 1 if axis == "concurrency" else 0
    problems = []
    if not 1 <= len(values) <= MAX_CELLS:
        problems.append(f"a sweep has 1 to {MAX_CELLS} cells (got {len(values)})")
    bad = [v for v in values if not low <= v <= AXIS_MAX[axis]]
    if bad:
        problems.append(f"{axis} values must be {low}–{AXIS_MAX[axis]:,} (got {', '.join(map(str, bad))})")
    if any(b <= a for a, b in itertools.pairwise(values)):
        problems.append(f"{axis} values must rise strictly, cell by cell (got {', '.join(map(str, values))})")
    if axis != "depth" and not 0 <= spec.depth <= MAX_DEPTH:
        problems.append(f"the fixed depth must be 0–{MAX_DEPTH:,} (got {spec.depth})")
    if axis != "concurrency" and not 1 <= spec.concurrency <= MAX_CONCURRENCY:
        problems.append(f"the fixed concurrency must be 1–{MAX_CONCURRENCY} (got {spec.concurrency})")
    if not 2 <= spec.output_tokens <= MAX_OUTPUT:
        problems.append(f"output tokens must be 2–{MAX_OUTPUT:,} (decode rate needs two)")
    if not 1 <= spec.reps <= MAX_REPS or spec.reps % 2 == 0:
        problems.append(f"repetitions must be odd, 1–{MAX_REPS} (got {spec.reps})")
    depths = values if axis == "depth" else [spec.depth]
    streams = values if axis == "concurrency" else [spec.concurrency]
    if max(depths, default=0) > 0 and max(streams, default=1) > 1 and not spec.force:
        problems.append(
            f"depth {max(depths)} with concurrency {max(streams)} needs force: deep prompts at concurrency "
            "deadlocked an engine once (sweep concurrency at depth 0, or depth at concurrency 1)"
        )
    if not problems and values:  # the profile's own bounds (timeout, instruction, …) on the largest cell
        cell = RunSpec.from_dict(spec.as_dict())
        setattr(cell, axis, values[-1])
        problems = spec_problems(cell)
    return "; ".join(problems) or None


def sweep_hash(*, axis, values, spec: RunSpec):
    fixed = {k: getattr(spec, k) for k in HASH_FIELDS if k != axis}
    return stable_hash({"fixed": fixed, "axis": axis, "values": list(values), "prompt_version": PROMPT_VERSION})


def sweep_create(*, engine, axis, values, spec: RunSpec, user=None, trigger=Run.Trigger.MANUAL, error_threshold=0.2):
    reason = sweep_validate(axis=axis, values=values, spec=spec)
    if reason:
        raise SweepError(reason)
    if not 0.0 <= error_threshold <= 1.0:
        raise SweepError(f"the error threshold is a share of requests, 0–1 (got {error_threshold})")
    return Sweep.objects.create(
        engine=engine,
        axis=axis,
        values=list(values),
        base=spec.as_dict(),
        params_hash=sweep_hash(axis=axis, values=values, spec=spec),
        error_threshold=error_threshold,
        trigger=trigger,
        created_by=user,
    )


def _publish(sweep, row=None):
    """The sweep page's live event: its status, and the cell row that changed (pre-rendered) with the chart's numbers."""
    payload = {"sweep": sweep.pk, "status": sweep.status, "stop_reason": sweep.stop_reason, "reason": sweep.reason}
    if row is not None:
        payload.update(
            value=row["value"],
            html=render_to_string("bench/_sweep_row.html", {"sweep": sweep, "r": row}),
            chart=chart_data(sweep),
        )
    publish_on_commit(GROUP_ALL, LiveEvent(type="bench.sweep", payload=payload))


def _cell_run(sweep, value):
    spec = RunSpec.from_dict(sweep.base)
    setattr(spec, sweep.axis, value)
    run = run_create(engine=sweep.engine, spec=spec, trigger=Run.Trigger.SWEEP, user=sweep.created_by)
    run.sweep, run.sweep_value = sweep, value
    run.save(update_fields=["sweep", "sweep_value"])
    return run


def cell_row(run, value):
    run.refresh_from_db()
    row = {"value": value, "run": run.pk, "status": run.status, "reason": run.reason, "tainted": run.tainted}
    row.update(cell_figures(run.repetitions.all()))
    row.pop("rounds", None)
    return row


def sweep_execute(*, sweep, on_cell=None):
    """Run every cell in order until the last one or an early stop; never raises for engine faults.
    ON_CELL(row) is called as each cell lands (the CLI prints it)."""
    claimed = Sweep.objects.filter(pk=sweep.pk, status=Run.Status.QUEUED).update(
        status=Run.Status.RUNNING, started_at=timezone.now()
    )
    sweep.refresh_from_db()
    if claimed != 1:
        return sweep
    _publish(sweep)
    for value in sweep.values:
        run = _cell_run(sweep, value)
        _publish(sweep, {"value": value, "state": "running", "run": run.pk})
        row = cell_row(run_execute(run=run), value)
        sweep.table = [*sweep.table, row]
        sweep.stop_reason = stop_reason(sweep.axis, sweep.table, sweep.error_threshold) or ""
        sweep.save(update_fields=["table", "stop_reason"])
        _publish(sweep, {"value": value, "state": "done", "cell": row})
        if on_cell is not None:
            on_cell(row)
        if sweep.stop_reason:
            break
    done = any(r["status"] == Run.Status.DONE for r in sweep.table)
    sweep.status = Run.Status.DONE if done else Run.Status.FAILED
    sweep.reason = "" if done else "no cell finished: " + sweep.stop_reason
    sweep.finished_at = timezone.now()
    sweep.save(update_fields=["status", "reason", "finished_at"])
    _publish(sweep)
    return sweep


def sweeps_fail_stale(*, idle_s=STALE_IDLE_S):
    """A running sweep with no cell queued or running for IDLE_S lost its worker: failed, with that reason
    (its finished cells stay). Claimed by conditional UPDATE, like the stale runs."""
    failed = 0
    cutoff = timezone.now() - timedelta(seconds=idle_s)
    for sweep in Sweep.objects.filter(status=Run.Status.RUNNING, started_at__lt=cutoff):
        cells = sweep.cells.all()
        if cells.filter(status__in=(Run.Status.QUEUED, Run.Status.RUNNING)).exists():
            continue
        last = cells.order_by("-finished_at").values_list("finished_at", flat=True).first()
        if last is not None and last > cutoff:
            continue
        failed += Sweep.objects.filter(pk=sweep.pk, status=Run.Status.RUNNING).update(
            status=Run.Status.FAILED,
            finished_at=timezone.now(),
            reason="the worker stopped mid-sweep (no cell running for "
            f"{idle_s // 60} minutes); the finished cells are kept",
        )
    return failed


def _pct(x):
    return f"{100 * x:.0f} %"


def stop_reason(axis, table, error_threshold):
    """Why the sweep stops after the last row of TABLE, or None."""
    row, name = table[-1], f"{axis} {table[-1]['value']:,}"
    if row["status"] in (Run.Status.REFUSED, Run.Status.FAILED) and not row["ok"]:
        return f"{name} {row['status']}: {row['reason']}"
    if row["error_share"] > error_threshold:
        buckets = ", ".join(f"{k} ×{v}" for k, v in row["errors"].items())
        return (
            f"errors passed {_pct(error_threshold)} at {name}: {row['requests'] - row['ok']} of "
            f"{row['requests']} requests failed ({buckets})"
        )
    if axis == "concurrency" and len(table) > 1:
        return _saturated(table[-2], row)
    return None


def _saturated(prev, row):
    a0, a1 = prev["aggregate_decode_tokens_per_s"], row["aggregate_decode_tokens_per_s"]
    t0, t1 = prev["ttft_ms"], row["ttft_ms"]
    if not (a0 and a1 and t0 and t1):
        return None
    streams = row["value"] / prev["value"]
    gain, growth = a1 / a0 - 1, t1 / t0
    if gain < SATURATION_GAIN and growth >= 1 + LINEAR_SHARE * (streams - 1):
        return (
            f"saturated at concurrency {row['value']}: aggregate decode {a0:,.1f} → {a1:,.1f} tok/s "
            f"({100 * gain:+.0f} %) while the TTFT median went {t0:,.0f} → {t1:,.0f} ms "
            f"(×{growth:.1f} for ×{streams:g} streams)"
        )
    return None
