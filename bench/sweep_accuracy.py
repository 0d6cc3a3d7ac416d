"""How exact are a sweep's cell figures? Concurrency sweeps of a simulated engine with a shared cap.

    .venv/bin/python bench/sweep_accuracy.py [--quick]

A simulated vLLM in its own process serves each stream at `rate` tok/s with a shared `aggregate_cap`
(simulator, engine option aggregate_cap), so the truth of every cell is known:
  aggregate decode = min(n · rate, cap),  per-stream decode = aggregate / n.
Each cell is `reps` rounds of n streams sent together through the benchmark client, read by the very
function a sweep uses (sparkops/benchmarks/cells.py: cell_figures). Prints, per engine setting and
concurrency, the figures and their error; exits 1 when any is off by more than 2 %. No database needed."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from harness_accuracy import SimProcess, body  # noqa: E402

from dashboard import http  # noqa: E402
from sparkops.benchmarks.cells import cell_figures  # noqa: E402
from sparkops.benchmarks.client import measure, stream_chat  # noqa: E402

TOLERANCE_PCT = 2.0


def as_rep(index, result, anchor):
    """A StreamResult shaped like a stored Repetition (what cell_figures reads)."""
    m = measure(result)
    started = datetime.fromtimestamp(anchor[1] + (result.t_send - anchor[0]), tz=UTC)
    return SimpleNamespace(
        index=index,
        ok=result.bucket is None,
        bucket=result.bucket or "",
        started_at=started,
        ttft_ms=m.ttft_ms,
        decode_tokens_per_s=m.decode_tokens_per_s,
        completion_tokens=m.completion_tokens,
        prompt_tokens=m.prompt_tokens,
        chunk_summary={"first_ms": m.ttft_ms, "last_ms": (result.chunk_times[-1] - result.t_send) * 1000},
    )


async def cell(url, n, tokens, reps):

    anchor = (time.monotonic(), time.time())
    reps_out = []
    async with http.async_client() as client:
        await stream_chat(client, url + "/v1/chat/completions", body(8), timeout=60)  # warm-up
        for i in range(reps):
            results = await asyncio.gather(
                *(stream_chat(client, url + "/v1/chat/completions", body(tokens), timeout=120) for _ in range(n))
            )
            reps_out += [as_rep(i, r, anchor) for r in results]
    return cell_figures(reps_out)


def pct(measured, truth):
    return 100.0 * (measured - truth) / truth


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    settings = [(100.0, 250.0, 80)] if args.quick else [(100.0, 250.0, 80), (400.0, 1000.0, 200), (50.0, 400.0, 60)]
    levels = [1, 2, 4] if args.quick else [1, 2, 4, 8, 16]
    worst = 0.0
    print(
        f"{'rate':>6} {'cap':>6} {'n':>3} {'aggregate':>10} {'truth':>8} {'err %':>6} {'per-stream':>10} {'err %':>6}"
    )
    for rate, cap, tokens in settings:
        sim = SimProcess(rate=rate, aggregate_cap=cap, ttft=0.005)
        try:
            for n in levels:
                f = asyncio.run(cell(sim.url, n, tokens, 3))
                truth = min(n * rate, cap)
                e_agg = pct(f["aggregate_decode_tokens_per_s"], truth)
                e_per = pct(f["per_stream_decode_tokens_per_s"], truth / n)
                worst = max(worst, abs(e_agg), abs(e_per))
                print(
                    f"{rate:>6.0f} {cap:>6.0f} {n:>3} {f['aggregate_decode_tokens_per_s']:>10.1f} {truth:>8.1f} "
                    f"{e_agg:>+6.2f} {f['per_stream_decode_tokens_per_s']:>10.2f} {e_per:>+6.2f}"
                )
        finally:
            sim.stop()
    print(f"worst error {worst:.2f} % (target ≤ {TOLERANCE_PCT} %)")
    return 0 if worst <= TOLERANCE_PCT else 1


if __name__ == "__main__":
    sys.exit(main())
