"""Benchmark services: queue a run, execute it, record every request.

`run_execute` owns the event loop (asyncio.Runner) and saves between rounds, so each
repetition is in the database — and on the run page's progress bar — as soon as it ends."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from datetime import UTC, datetime

from django.utils import timezone

from sparkops.measured.conditions import conditions_snapshot, config_snapshot
from sparkops.measured.services import close_window, every_request_failed, run_row, summary_head

from .client import check_output, measure
from .models import Repetition, Run
from .regression import regression_check
from .session import BenchSession, CalibrationError
from .spec import RunSpec
from .stats import run_stats
from .verify import cache_checks, depth_check, preflight

log = logging.getLogger(__name__)


def run_create(*, engine, spec: RunSpec, profile=None, trigger=Run.Trigger.MANUAL, user=None, pair=None, phase=""):
    """A queued run carrying its full parameters (executed later by a worker or the CLI)."""
    fields = {"pair": pair, "phase": phase, "total_reps": spec.reps * spec.concurrency}
    return run_row(Run, engine=engine, spec=spec, profile=profile, trigger=trigger, user=user, **fields)


def _fail(run, reason):
    return run.end(Run.Status.FAILED, reason, also=("stats", "checks", "config"))


def _wall(t_mono, anchor):
    """A monotonic instant as wall-clock time (anchor = (monotonic, wall) taken together)."""
    return datetime.fromtimestamp(anchor[1] + (t_mono - anchor[0]), tz=UTC)


def save_round(run, index, results, spec, anchor):
    """One round's requests as Repetition rows (checked against the pinned output), counted on the run."""
    rows = []
    for stream, result in enumerate(results):
        check_output(result, spec.output_tokens)
        row = Repetition(
            run=run,
            index=index,
            stream=stream,
            started_at=_wall(result.t_send, anchor),
            ok=result.bucket is None,
            bucket=result.bucket or "",
            error=result.error,
            http_status=result.status,
            finish_reason=result.finish_reason or "",
            timings=result.timings,
        )
        if row.ok:
            m = measure(result)
            for name in (
                "ttft_ms",
                "first_answer_ms",
                "decode_tokens_per_s",
                "chunks",
                "prompt_tokens",
                "cached_tokens",
                "completion_tokens",
                "reasoning_tokens",
                "reasoning_chunks",
                "total_ms",
            ):
                setattr(row, name, getattr(m, name))
            row.chunk_summary = {
                "gap_ms": m.chunk_gap_ms,
                "first_ms": m.ttft_ms,
                "last_ms": (result.chunk_times[-1] - result.t_send) * 1000,
            }
        rows.append(row)
    Repetition.objects.bulk_create(rows)
    run.done_reps += len(rows)
    run.save(update_fields=["done_reps"])
    run.progress()
    return rows


def _measure(run, spec, runner, anchor, ready=None):
    """Open the session, refuse if the prompt cannot fit, warm up, send every round."""
    session = runner.run(BenchSession(spec).open())
    try:
        window = (run.engine.latest or {}).get("window") or session.info.get("window")
        reason = preflight(spec=spec, window=window, engine_status=run.engine.status)
        if reason:
            return reason, []
        runner.run(session.calibrate())
        waited = run.config.get("waited")  # a scheduled run postponed while its box was starting says so
        run.config = config_snapshot(engine=run.engine, spec=spec, info=session.info)
        if waited:
            run.config["waited"] = waited
        run.config["warmup"] = _brief(runner.run(session.warmup()))
        if spec.mode == "follow_up":
            run.config["prime"] = _brief(runner.run(session.prime()))
        run.save(update_fields=["config"])
        if ready is not None:  # co-residency: start the rounds together with the other engine
            ready()
        reps = []
        for index in range(spec.reps):
            reps += save_round(run, index, runner.run(session.round(index)), spec, anchor)
        return None, reps
    finally:
        runner.run(session.close())


def _brief(result):
    return {
        "ok": result.bucket is None,
        "bucket": result.bucket,
        "error": result.error,
        "cached_tokens": ((result.usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens"),
    }


def run_execute(*, run, partner_ids=(), ready=None):
    """Execute a queued run end to end; never raises for engine faults (they are recorded)."""
    if not run.claim():
        return run
    run.progress()
    spec = RunSpec.from_dict(run.config["params"])
    before = conditions_snapshot(engine=run.engine, partner_ids=partner_ids)
    anchor = (time.monotonic(), timezone.now().timestamp())
    try:
        with asyncio.Runner() as runner:
            refusal, reps = _measure(run, spec, runner, anchor, ready)
    except CalibrationError as exc:
        return _fail(run, f"could not build the prompt to depth {spec.depth}: {exc}")
    if refusal:
        return run.refuse(refusal)
    return run_finish(run=run, spec=spec, reps=reps, before=before, partner_ids=partner_ids)


def run_finish(*, run, spec, reps, before, partner_ids=()):
    close_window(run, before, partner_ids=partner_ids)
    run.checks = cache_checks(spec=spec, reps=reps) + depth_check(spec=spec, reps=reps)
    errors = Counter(r.bucket for r in reps if not r.ok)
    run.stats = run_stats([_as_dict(r) for r in reps if r.ok], errors, spec.reps)
    failed_checks = [c["name"] for c in run.checks if c["ok"] is False]
    if not any(r.ok for r in reps):
        run.status, run.reason = Run.Status.FAILED, every_request_failed(errors)
    elif failed_checks:
        run.status, run.reason = Run.Status.FAILED, "verification failed: " + ", ".join(failed_checks)
    else:
        run.status = Run.Status.DONE
    run.save()
    run.progress()
    if run.trigger == Run.Trigger.SCHEDULED:
        regression_check(run=run)
    return run


def _as_dict(rep):
    return {
        name: getattr(rep, name)
        for name in (
            "ttft_ms",
            "first_answer_ms",
            "decode_tokens_per_s",
            "prompt_tokens",
            "completion_tokens",
            "cached_tokens",
            "reasoning_tokens",
            "chunks",
            "total_ms",
        )
    }


def run_summary(run):
    """The result as `sparkops bench run --json` prints it."""
    stats = run.stats or {}
    out = {
        **summary_head(run),
        "tainted": run.tainted,
        "taint_reasons": run.taint_reasons,
        "checks": run.checks,
        "waited": run.config.get("waited"),  # a scheduled run postponed while its box was starting
    }
    for name in (
        "ttft_ms",
        "first_answer_ms",
        "decode_tokens_per_s",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "reasoning_tokens",
        "chunks",
    ):
        out[name] = {k: v for k, v in (stats.get(name) or {"n": 0}).items()}
    out["errors"] = stats.get("errors", {})
    out["reps"] = stats.get("reps", (run.config.get("params") or {}).get("reps"))
    return out
