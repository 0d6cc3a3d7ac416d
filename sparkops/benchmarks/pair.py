"""Co-residency: each engine alone, then both generating at once.

One-at-a-time readings hide the compute penalty (a 64 % loss on the fast model in
docs/field-notes.md §10). In the "both" phase the two sides start their repetitions together
(a barrier after warm-up) and a side that finishes first keeps its engine generating
until the other is done, so every measured request had a busy neighbour."""

from __future__ import annotations

import asyncio
import contextlib
import threading

from django.db import connection
from django.utils import timezone

from dashboard import http

from .client import stream_chat
from .models import PairRun, Run
from .services import run_create, run_execute
from .spec import RunSpec, new_salt

BARRIER_TIMEOUT_S = 900


def pair_create(*, profile_a, profile_b, user=None):
    if profile_a.engine_id == profile_b.engine_id:
        raise ValueError("a co-residency pair needs two different engines")
    return PairRun.objects.create(profile_a=profile_a, profile_b=profile_b, created_by=user)


def _run(pair, profile, phase):
    return run_create(
        engine=profile.engine,
        spec=profile.spec(),
        profile=profile,
        trigger=Run.Trigger.PAIR,
        user=pair.created_by,
        pair=pair,
        phase=phase,
    )


def pair_execute(*, pair):
    if PairRun.objects.filter(pk=pair.pk, status=Run.Status.QUEUED).update(status=Run.Status.RUNNING) != 1:
        return pair
    a, b = pair.profile_a, pair.profile_b
    solo = {a.pk: run_execute(run=_run(pair, a, "solo")), b.pk: run_execute(run=_run(pair, b, "solo"))}
    both = _both(pair, a, b)
    pair.table = pair_table(a=a, b=b, solo=solo, both=both)
    failed = [r for r in (*solo.values(), *both.values()) if r.status != Run.Status.DONE]
    pair.status = Run.Status.FAILED if failed else Run.Status.DONE
    pair.reason = "; ".join(f"{r.engine.name} {r.phase}: {r.status} {r.reason}" for r in failed)
    pair.finished_at = timezone.now()
    pair.save()
    return pair


def _both(pair, a, b):
    runs = {a.pk: _run(pair, a, "both"), b.pk: _run(pair, b, "both")}
    barrier = threading.Barrier(2, timeout=BARRIER_TIMEOUT_S)
    done = {a.pk: threading.Event(), b.pk: threading.Event()}
    other = {a.pk: b.pk, b.pk: a.pk}
    threads = [
        threading.Thread(
            target=_side,
            args=(runs[p], runs[other[p]].engine_id, barrier, done[p], done[other[p]]),
            name=f"bench-pair-{p}",
        )
        for p in runs
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for run in runs.values():
        run.refresh_from_db()
    return runs


def _side(run, partner_engine_id, barrier, mine, theirs):
    try:
        run_execute(run=run, partner_ids=(partner_engine_id,), ready=lambda: _wait(barrier))
    finally:
        mine.set()
        if barrier.n_waiting:  # refused before the barrier: release the other side
            barrier.abort()
    try:
        asyncio.run(keep_busy(RunSpec.from_dict(run.config["params"]), theirs))
    finally:
        connection.close()  # this thread's own connection; Django does not close it for us


def _wait(barrier):
    with contextlib.suppress(threading.BrokenBarrierError):  # the other side never got there; its run says why
        barrier.wait()


async def keep_busy(spec, stop: threading.Event):
    """Keep the engine generating (results discarded) until the other side is done."""
    async with http.async_client() as client:
        while not stop.is_set():
            msgs = [{"role": "user", "content": f"[load {new_salt()}] {spec.instruction}"}]
            result = await stream_chat(client, spec.chat_url(), spec.body(msgs), timeout=spec.timeout_s)
            if result.bucket in ("disconnect", "timeout"):
                await asyncio.sleep(0.5)


def _median(run, metric):
    return ((run.stats or {}).get(metric) or {}).get("median")


def pair_table(*, a, b, solo, both):
    """Rows per engine: solo vs both decode (change %), TTFT; plus the combined rate."""
    rows = []
    for profile in (a, b):
        s, t = _median(solo[profile.pk], "decode_tokens_per_s"), _median(both[profile.pk], "decode_tokens_per_s")
        change = None if not s or t is None else 100.0 * (t - s) / s
        rows.append(
            {
                "engine": profile.engine.name,
                "profile": profile.name,
                "solo_decode": s,
                "both_decode": t,
                "change_pct": change,
                "solo_ttft_ms": _median(solo[profile.pk], "ttft_ms"),
                "both_ttft_ms": _median(both[profile.pk], "ttft_ms"),
                "solo_run": solo[profile.pk].pk,
                "both_run": both[profile.pk].pk,
            }
        )
    both_rates = [r["both_decode"] for r in rows]
    combined = sum(both_rates) if None not in both_rates else None
    best_solo = max((r["solo_decode"] or 0) for r in rows) or None
    return {
        "rows": rows,
        "combined_both_decode": combined,
        "best_solo_decode": best_solo,
        "combined_vs_best_solo_pct": None
        if not (combined and best_solo)
        else 100.0 * (combined - best_solo) / best_solo,
    }
