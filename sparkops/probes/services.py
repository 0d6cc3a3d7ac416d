"""Probe services: queue a run, execute it with the benchmark's methodology, keep every case.

Same rules as a benchmark run: the parameters pinned in the run's config, the profile's sampling
(server defaults unless stated), one warm-up request discarded, repetitions per case, failures in
their buckets (never scored), the run tainted when the box was busy. `probe_run_execute` owns the
event loop (asyncio.Runner) and saves each case as soon as it ends."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from sparkops.measured.conditions import conditions_snapshot
from sparkops.measured.services import close_window, every_request_failed, run_row, summary_head

from .contract import ContractProbe
from .haystack import CorpusError
from .models import ProbeCase, ProbeRun
from .needle import NeedleProbe
from .regression import quality_check
from .session import ProbeSession, TokenizeError
from .soak import SoakProbe
from .spec import ProbeSpec
from .thinking import ThinkingProbe
from .toolcall import ToolProbe


class Probe(Protocol):
    """What `_measure` asks of every probe kind: prepare for the engine's window (a refusal, or None),
    how many cases, the cases as jobs to await one by one, and the summary of their results."""

    def __init__(self, spec: ProbeSpec, session: ProbeSession, salt: str) -> None: ...

    async def prepare(self, window: Any) -> Any: ...

    @property
    def total(self) -> int: ...

    def jobs(self) -> Iterable[Callable[[], Awaitable[Any]]]: ...

    def summarize(self, cases: list) -> dict: ...


PROBES: dict[str, type[Probe]] = {
    "needle": NeedleProbe,
    "soak": SoakProbe,
    "tool": ToolProbe,
    "thinking": ThinkingProbe,
    "contract": ContractProbe,
}
QUALITY_RULE = "quality_regression"


def probe_run_create(*, engine, spec: ProbeSpec, profile=None, trigger=ProbeRun.Trigger.MANUAL, user=None):
    return run_row(ProbeRun, engine=engine, spec=spec, profile=profile, trigger=trigger, user=user, kind=spec.kind)


def _save_case(run, index, data):
    ProbeCase.objects.create(run=run, index=index, **data)
    run.done_cases = index + 1
    run.save(update_fields=["done_cases"])
    run.progress()


def _window(run, session):
    return (run.engine.latest or {}).get("window") or session.info.get("window")


def _measure(run, spec, runner):
    """Open the session, prepare the probe (haystacks counted by the engine), warm up, send each case."""
    session = runner.run(ProbeSession(spec).open())
    try:
        probe = PROBES[spec.kind](spec, session, salt=uuid.uuid4().hex[:12])
        refusal = runner.run(probe.prepare(_window(run, session)))
        if refusal:
            return refusal, None, []
        run.total_cases = probe.total
        run.config = {**run.config, **_config(run, spec, session)}
        run.config["warmup"] = _brief(runner.run(session.warmup()))
        run.save(update_fields=["config", "total_cases"])
        run.progress()
        cases = []
        for index, job in enumerate(probe.jobs()):
            data = runner.run(job())
            cases.append(data)
            _save_case(run, index, data)
        return None, probe, cases
    finally:
        runner.run(session.close())


def _config(run, spec, session):
    latest = run.engine.latest or {}
    info = session.info
    return {
        "params": spec.as_dict(),
        "params_hash": spec.params_hash(),
        "engine": {
            "name": run.engine.name,
            "kind": run.engine.kind,
            "url": run.engine.url,
            "models": latest.get("models") or ([info["model"]] if info.get("model") else []),
            "version": info.get("version"),
            "window": _window(run, session),
        },
    }


def _brief(result):
    return {"ok": result.bucket is None, "bucket": result.bucket, "error": result.error}


def probe_run_execute(*, run):
    """Execute a queued run end to end; never raises for engine faults (they are recorded)."""
    if not run.claim():
        return run
    run.progress()
    spec = ProbeSpec.from_dict(run.config["params"])
    before = conditions_snapshot(engine=run.engine)
    try:
        with asyncio.Runner() as runner:
            refusal, probe, cases = _measure(run, spec, runner)
    except CorpusError as exc:
        return run.end(ProbeRun.Status.FAILED, str(exc))
    except TokenizeError as exc:
        return run.end(ProbeRun.Status.FAILED, f"could not count the haystack's tokens on the engine: {exc}")
    if refusal:
        return run.refuse(refusal)
    return probe_run_finish(run=run, probe=probe, cases=cases, before=before)


def probe_run_finish(*, run, probe, cases, before):
    # A probe's own alert must not taint the run that would resolve it.
    close_window(run, before, own_alert=QUALITY_RULE)
    run.result = probe.summarize(cases)
    run.passed, run.headline = run.result.get("passed"), run.result.get("headline", "")[:200]
    errors = Counter(c["bucket"] for c in cases if not c["ok"])
    if not any(c["ok"] for c in cases) and not isinstance(probe, ContractProbe):
        run.status = ProbeRun.Status.FAILED
        run.reason = every_request_failed(errors)
        run.passed = None
    else:
        run.status = ProbeRun.Status.DONE
    run.result["errors"] = dict(errors)
    run.save()
    run.progress()
    if run.profile_id is not None:
        quality_check(run=run)
    return run


def probe_summary(run):
    """The result as `sparkops probe run --json` prints it."""
    return {
        **summary_head(run, kind=run.kind),
        "passed": run.passed,
        "headline": run.headline,
        "tainted": run.tainted,
        "taint_reasons": run.taint_reasons,
        "regression": run.regression,
        "result": run.result,
        "cases": [
            {
                "label": c.label,
                "rep": c.rep,
                "ok": c.ok,
                "bucket": c.bucket,
                "http_status": c.http_status,
                "verdict": c.verdict,
                "finish_reason": c.finish_reason,
                "prompt_tokens": c.prompt_tokens,
                "completion_tokens": c.completion_tokens,
                "reasoning_tokens": c.reasoning_tokens,
                "seconds": c.seconds,
                "answer": c.text[:300],
                "detail": c.detail,
            }
            for c in run.cases.all()
        ],
    }
