"""The figures of one cell (one run: `reps` rounds of `concurrency` streams at once), as the
sweep tables of docs/field-notes.md §12 give them. Computed from the stored repetitions, so any run —
a sweep's cell, an A/B arm, an old run — reads the same way.

Per round (one repetition, all its streams sent together):
- aggregate decode tok/s: the tokens generated after each stream's first token, summed over
  the streams, over the wall time of the round's generating phase (the first stream's first
  token to the last stream's last token). One stream: exactly its own (N − 1) / (last − first).
- aggregate prefill tok/s: the prompt tokens of every stream over the time until the last of
  them had its first token (all were sent at once).
- per-stream decode tok/s: the median of the streams' own decode rates.
The cell's figure is the median over its rounds, with the sample sd over rounds (± in the
tables; None with one round). TTFT median and p90 are over every request of the cell; p90
only where stats.PERCENTILE_MIN_N allows. Failed requests are counted by bucket, never timed."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from datetime import timedelta

from .stats import summarize

FIGURES = ("aggregate_decode_tokens_per_s", "per_stream_decode_tokens_per_s", "aggregate_prefill_tokens_per_s")


def _span(rep):
    """(first token, last token) of one ok repetition as datetimes, or None."""
    chunks = rep.chunk_summary or {}
    if rep.started_at is None or chunks.get("first_ms") is None or chunks.get("last_ms") is None:
        return None
    return (
        rep.started_at + timedelta(milliseconds=chunks["first_ms"]),
        rep.started_at + timedelta(milliseconds=chunks["last_ms"]),
    )


def round_figures(reps):
    """The three rates of one round from its ok repetitions (None where not measurable)."""
    ok = [r for r in reps if r.ok]
    spans = [s for s in (_span(r) for r in ok) if s is not None]
    decoded = sum(max(0, (r.completion_tokens or 0) - 1) for r in ok)
    out = dict.fromkeys(FIGURES)
    if spans:
        wall = (max(s[1] for s in spans) - min(s[0] for s in spans)).total_seconds()
        out["aggregate_decode_tokens_per_s"] = decoded / wall if wall > 0 and decoded else None
    per_stream = [r.decode_tokens_per_s for r in ok if r.decode_tokens_per_s is not None]
    if per_stream:
        out["per_stream_decode_tokens_per_s"] = statistics.median(per_stream)
    ttfts = [r.ttft_ms for r in ok if r.ttft_ms is not None]
    prompt = sum(r.prompt_tokens or 0 for r in ok)
    if ttfts and prompt and max(ttfts) > 0:
        out["aggregate_prefill_tokens_per_s"] = prompt / (max(ttfts) / 1000)
    return out


def _median_sd(values):
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None
    return statistics.median(vals), (statistics.stdev(vals) if len(vals) > 1 else None)


def cell_figures(reps):
    """Every figure of a cell from its repetitions (Repetition rows or objects shaped like them)."""
    reps = list(reps)
    rounds = defaultdict(list)
    for r in reps:
        rounds[r.index].append(r)
    per_round = [round_figures(rounds[i]) for i in sorted(rounds)]
    out = {}
    for name in FIGURES:
        out[name], out[f"{name}_sd"] = _median_sd([f[name] for f in per_round])
    ttft = summarize([r.ttft_ms for r in reps if r.ok])
    out["ttft_ms"], out["ttft_p90_ms"] = ttft.get("median"), ttft.get("p90")
    out["ttft_ms_sd"] = _median_sd([_median_of(rounds[i], "ttft_ms") for i in sorted(rounds)])[1]
    out["requests"], out["ok"] = len(reps), sum(1 for r in reps if r.ok)
    out["errors"] = dict(Counter(r.bucket for r in reps if not r.ok))
    out["error_share"] = (out["requests"] - out["ok"]) / out["requests"] if reps else 0.0
    out["rounds"] = [{k: v for k, v in f.items()} for f in per_round]
    return out


def _median_of(reps, name):
    vals = [getattr(r, name) for r in reps if r.ok and getattr(r, name) is not None]
    return statistics.median(vals) if vals else None


def run_cell_figures(run):
    """cell_figures of a stored run."""
    return cell_figures(run.repetitions.all())
