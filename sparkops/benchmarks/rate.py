"""Rate mode (what vLLM's `bench serve` and AIPerf call request rate): requests arrive at a fixed
or Poisson rate for a duration, whatever is still running, and goodput is the share of requests
that met both SLOs — time to first token and time per output token (TPOT: the mean inter-token
time, (last − first) / (N − 1)). A failed request never meets an SLO.

The run is a bench Run (trigger "rate"): the same warm-up, pinned output, buckets, checks and
taint as any run, one Repetition per request (index = arrival order). Requests are sent from one
event loop and saved when the last one ends, so no database write ever pauses a stream."""

from __future__ import annotations

import asyncio
import random
import time

from django.utils import timezone

from sparkops.measured.conditions import conditions_snapshot, config_snapshot

from .bounds import spec_problems
from .client import stream_chat
from .models import MAX_DEPTH, MAX_OUTPUT, Run
from .services import run_finish, save_round
from .session import BenchSession, CalibrationError
from .spec import RunSpec
from .stats import summarize
from .verify import preflight

MAX_DURATION_S, MAX_RATE, MAX_REQUESTS = 3600.0, 200.0, 20_000
ARRIVALS = ("fixed", "poisson")


class RateError(ValueError):
    pass


def arrival_offsets(*, rate, duration_s, arrival, seed=0):
    """Send times (seconds from the start) of every request that arrives within the duration."""
    rng, t = random.Random(seed), 0.0
    out: list[float] = []
    while True:
        t = len(out) / rate if arrival == "fixed" else t + rng.expovariate(rate)
        if t >= duration_s or len(out) >= MAX_REQUESTS:
            return out
        out.append(t)


def rate_validate(*, spec, rate, duration_s, arrival, slo_ttft_ms, slo_tpot_ms):
    problems = []
    if not 0 < rate <= MAX_RATE:
        problems.append(f"the rate is requests per second, above 0 and at most {MAX_RATE:g} (got {rate:g})")
    if not 0 < duration_s <= MAX_DURATION_S:
        problems.append(f"the duration is 0–{MAX_DURATION_S:g} s (got {duration_s:g})")
    if arrival not in ARRIVALS:
        problems.append(f"arrivals are fixed or poisson, not {arrival!r}")
    if not (slo_ttft_ms > 0 and slo_tpot_ms > 0):
        problems.append("both SLOs (TTFT and TPOT, ms) must be above 0")
    if not 2 <= spec.output_tokens <= MAX_OUTPUT or not 0 <= spec.depth <= MAX_DEPTH:
        problems.append(f"output tokens 2–{MAX_OUTPUT:,}, depth 0–{MAX_DEPTH:,}")
    if spec.depth > 0 and not spec.force:
        problems.append(
            f"depth {spec.depth} needs force in rate mode: arriving requests overlap, and deep prompts at "
            "concurrency deadlocked an engine once"
        )
    if not problems and len(arrival_offsets(rate=rate, duration_s=duration_s, arrival="fixed")) >= MAX_REQUESTS:
        problems.append(f"at most {MAX_REQUESTS:,} requests per run")
    if not problems:
        problems = spec_problems(spec)  # the profile's own bounds (timeout, instruction, …)
    return "; ".join(problems) or None


def rate_create(
    *, engine, spec: RunSpec, rate, duration_s, arrival="fixed", slo_ttft_ms, slo_tpot_ms, seed=0, user=None
):
    reason = rate_validate(
        spec=spec, rate=rate, duration_s=duration_s, arrival=arrival, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms
    )
    if reason:
        raise RateError(reason)
    spec.reps, spec.concurrency = 1, 1  # one request per arrival; the arrival rate sets the overlap
    offsets = arrival_offsets(rate=rate, duration_s=duration_s, arrival=arrival, seed=seed)
    run = Run.objects.create(
        engine=engine,
        params_hash=spec.params_hash(),
        trigger=Run.Trigger.RATE,
        created_by=user,
        config={
            "params": spec.as_dict(),
            "rate": {
                "rate_rps": rate,
                "duration_s": duration_s,
                "arrival": arrival,
                "seed": seed,
                "slo_ttft_ms": slo_ttft_ms,
                "slo_tpot_ms": slo_tpot_ms,
            },
        },
        total_reps=len(offsets),
    )
    return run


async def _send_all(session, offsets):
    """Every request at its arrival time (not waiting for the ones still running)."""
    spec, start = session.spec, time.monotonic() + 0.05

    async def one(i, offset):
        delay = start + offset - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        body = spec.body(session.messages(turn=i + 1))
        return await stream_chat(session.client, spec.chat_url(), body, timeout=spec.timeout_s)

    return await asyncio.gather(*(one(i, off) for i, off in enumerate(offsets)))


def rate_execute(*, run):
    """Execute a queued rate run end to end; engine faults are recorded, never raised."""
    if not run.claim():
        return run
    run.progress()
    spec, cfg = RunSpec.from_dict(run.config["params"]), run.config["rate"]
    offsets = arrival_offsets(
        rate=cfg["rate_rps"], duration_s=cfg["duration_s"], arrival=cfg["arrival"], seed=cfg["seed"]
    )
    before = conditions_snapshot(engine=run.engine)
    anchor = (time.monotonic(), timezone.now().timestamp())
    try:
        with asyncio.Runner() as runner:
            session = runner.run(BenchSession(spec).open())
            try:
                window = (run.engine.latest or {}).get("window") or session.info.get("window")
                refusal = preflight(spec=spec, window=window, engine_status=run.engine.status)
                if refusal:
                    return run.refuse(refusal)
                runner.run(session.calibrate())
                run.config = {**config_snapshot(engine=run.engine, spec=spec, info=session.info), "rate": cfg}
                run.config["warmup"] = {"ok": runner.run(session.warmup()).bucket is None}
                run.save(update_fields=["config"])
                t0 = time.monotonic()
                results = runner.run(_send_all(session, offsets))
                wall = time.monotonic() - t0
            finally:
                runner.run(session.close())
    except CalibrationError as exc:
        return run.end(Run.Status.FAILED, f"could not build the prompt: {exc}", also=("config",))
    reps = []
    for i, result in enumerate(results):
        reps += save_round(run, i, [result], spec, anchor)
    run = run_finish(run=run, spec=spec, reps=reps, before=before)
    run.stats = {**run.stats, "rate": goodput(reps, cfg, wall)}
    run.save(update_fields=["stats"])
    return run


def tpot_ms(rep):
    """Mean time per output token after the first, ms (None for one token)."""
    chunks = rep.chunk_summary or {}
    n = rep.completion_tokens or 0
    if n < 2 or chunks.get("first_ms") is None:
        return None
    return (chunks["last_ms"] - chunks["first_ms"]) / (n - 1)


def goodput(reps, cfg, wall_s):
    """What the rate run delivered: sent, ok, achieved rate, goodput share and rate, TTFT and TPOT."""
    met = [
        r
        for r in reps
        if r.ok
        and r.ttft_ms is not None
        and r.ttft_ms <= cfg["slo_ttft_ms"]
        and (tpot_ms(r) or 0) <= cfg["slo_tpot_ms"]
    ]
    ok = [r for r in reps if r.ok]
    ttft, tpot = summarize([r.ttft_ms for r in ok]), summarize([tpot_ms(r) for r in ok])
    sent = len(reps)
    return {
        **cfg,
        "sent": sent,
        "ok": len(ok),
        "met_slo": len(met),
        "goodput_share": len(met) / sent if sent else None,
        "goodput_rps": len(met) / cfg["duration_s"],
        "offered_rps": sent / cfg["duration_s"],
        "wall_s": wall_s,
        "output_tokens_per_s": sum(r.completion_tokens or 0 for r in ok) / wall_s if wall_s > 0 else None,
        "ttft_ms": ttft.get("median"),
        "ttft_p90_ms": ttft.get("p90"),
        "tpot_ms": tpot.get("median"),
        "tpot_p90_ms": tpot.get("p90"),
    }
