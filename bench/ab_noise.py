"""How often does the A/B verdict get it wrong? Repeated experiments against simulated engines.

    .venv/bin/python bench/ab_noise.py [--experiments 10] [--reps 3] [--tokens 48]

Two simulated vLLM engines (simulator, each its own process) at known rates. Each
experiment alternates A, B, A, B … for REPS slots per arm, a slot being what an experiment's
slot is (sparkops/experiments/runner.py): a warm-up request, then one measured request with
pinned output, read by the benchmark client (sparkops/benchmarks/client.py). The decode figures
go through the experiment's own verdict (sparkops/experiments/stats.py: ratio of medians, seeded
percentile bootstrap, the 1 % floor). Reported:
  1. A/A, 50 vs 50 tok/s: the share of experiments that wrongly say "faster"/"slower" (target 0);
  2. A/B, 50 vs 55 tok/s: the share that say "faster" (target all) and that hold 1.10 in the
     interval (target all), with the ratios' spread.
No database needed; the slot loop is re-stated here so that it runs without one. Exits 1 when a
target is missed."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from harness_accuracy import SimProcess, body  # noqa: E402

from dashboard import http  # noqa: E402
from sparkops.benchmarks.client import measure, stream_chat  # noqa: E402
from sparkops.experiments import stats  # noqa: E402


async def slot(url, tokens):
    """One slot: its own client, a warm-up request, one measured request; its decode tok/s."""
    async with http.async_client() as client:
        await stream_chat(client, url + "/v1/chat/completions", body(min(16, tokens)), timeout=120)
        result = await stream_chat(client, url + "/v1/chat/completions", body(tokens), timeout=120)
    if result.bucket:
        raise RuntimeError(f"request failed: {result.bucket} {result.error}")
    return measure(result).decode_tokens_per_s


async def experiment(url_a, url_b, reps, tokens, seed):
    values = {"A": [], "B": []}
    for _ in range(reps):
        values["A"].append(await slot(url_a, tokens))
        values["B"].append(await slot(url_b, tokens))
    return stats.verdict({"decode_tokens_per_s": values}, seed=seed)["decode_tokens_per_s"]


def series(rate_a, rate_b, n, reps, tokens):
    a, b = SimProcess(rate=rate_a, ttft=0.01), SimProcess(rate=rate_b, ttft=0.01)
    try:
        return [asyncio.run(experiment(a.url, b.url, reps, tokens, seed=i)) for i in range(n)]
    finally:
        a.stop()
        b.stop()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--experiments", type=int, default=10)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=48)
    args = parser.parse_args()
    ok = True
    same = series(50, 50, args.experiments, args.reps, args.tokens)
    wrong = [r for r in same if r["verdict"] != "no difference within noise"]
    ratios = [r["ratio"] for r in same]
    print(
        f"A/A 50 vs 50, {args.experiments} experiments × {args.reps} reps/arm × {args.tokens} tokens: "
        f"{len(wrong)} wrong verdicts; ratio {min(ratios):.4f}–{max(ratios):.4f}, "
        f"median interval width {statistics.median(r['ci_high'] - r['ci_low'] for r in same):.4f}"
    )
    ok &= not wrong
    diff = series(50, 55, args.experiments, args.reps, args.tokens)
    faster = sum(r["verdict"] == "faster" for r in diff)
    held = sum(r["ci_low"] <= 1.10 <= r["ci_high"] for r in diff)
    ratios = [r["ratio"] for r in diff]
    print(
        f"A/B 50 vs 55: {faster}/{len(diff)} say faster, {held}/{len(diff)} intervals hold 1.10; "
        f"ratio {min(ratios):.4f}–{max(ratios):.4f} (median {statistics.median(ratios):.4f}), "
        f"median interval {statistics.median(r['ci_low'] for r in diff):.4f}–{statistics.median(r['ci_high'] for r in diff):.4f}"
    )
    ok &= faster == len(diff) and held == len(diff)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
