"""Statistics over repetitions: n, median, min, max; percentiles only where n allows.

A percentile p is reported only when n >= PERCENTILE_MIN_N[p] — with fewer samples the
"p95" is just the maximum under another name."""

import statistics
from fractions import Fraction

PERCENTILE_MIN_N = {90: 10, 95: 20, 99: 100}
FIELDS = (
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


def percentile(values, p):
    """The P-th percentile (0..100, e.g. 95 or 2.5) of VALUES (at least one), interpolated between
    the two nearest ranks: `statistics.quantiles(method="inclusive")`, numpy's default "linear".
    The one meaning of a percentile in SparkOps (benchmark p90/p95/p99, the A/B bootstrap interval)."""
    share = Fraction(str(p)) / 100
    if not 0 <= share <= 1:
        raise ValueError(f"percentile {p} is not within 0..100")
    if len(values) == 1 or share in (0, 1):
        return min(values) if share == 0 else max(values)
    return statistics.quantiles(values, n=share.denominator, method="inclusive")[share.numerator - 1]


def summarize(values):
    """{n, median, min, max[, p90, p95, p99]} of the non-None values; {"n": 0} when none."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return {"n": 0}
    out = {"n": len(vals), "median": statistics.median(vals), "min": vals[0], "max": vals[-1]}
    for p, min_n in PERCENTILE_MIN_N.items():
        if len(vals) >= min_n:
            out[f"p{p}"] = percentile(vals, p)
    return out


def spread(values):
    """max − min of the values (the noise estimate the regression rule uses)."""
    vals = [v for v in values if v is not None]
    return (max(vals) - min(vals)) if vals else 0.0


def run_stats(measurements, errors, reps):
    """The stats object of one run: each field summarised, errors by bucket, reps asked for."""
    out = {name: summarize([m.get(name) for m in measurements]) for name in FIELDS}
    out["errors"] = dict(errors)
    out["reps"] = reps
    out["ok"] = len(measurements)
    return out
