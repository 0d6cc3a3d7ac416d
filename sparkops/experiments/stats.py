"""The verdict of an A/B experiment: per figure, the ratio of medians B / A with a seeded
percentile bootstrap interval, and a word.

Why a bootstrap and not a rank test: with three repetitions per arm the Mann–Whitney test's
smallest two-sided p is 0.1, so it could never say "faster" at the minimum (docs/field-notes.md §12).
The bootstrap resamples each arm's valid repetitions with replacement (RESAMPLES times, from
random.Random(seed): the same runs always give the same interval), takes the ratio of the
resampled medians, and reports its 2.5th and 97.5th percentiles (a 95 % percentile interval).

The interval is then widened by RESOLUTION on each side: a bootstrap over three steady readings
knows nothing of the harness's own systematic error, and bench/ab_noise.py measured one (a ~0.1 %
low reading of a 55 tok/s engine over 48 tokens, the last chunk's read latency) that a bare
3-repetition interval of the simulator's very steady rates would exclude. On a real engine, whose
repetitions spread 1–3 %, the widening is small beside the bootstrap's own width.

The word: "faster" or "slower" when the interval lies wholly on one side of 1 and the ratio is
at least MIN_EFFECT away from it; otherwise "no difference within noise". MIN_EFFECT is the
resolution of the method (a scheduler's jitter moves a median by a fraction of a percent), so a
0.3 % gap between two identical engines that happens to be steady is not called a win. For decode
higher is better; for TTFT and total time lower is better, so B "faster" there is a ratio below 1."""

import random
import statistics
from collections.abc import Sequence
from typing import Any

from sparkops.benchmarks.stats import percentile

RESAMPLES = 2000
CONFIDENCE = 0.95
MIN_EFFECT = 0.01
RESOLUTION = 0.005
FIGURES = (  # (key in a run's stats, label, higher is better)
    ("decode_tokens_per_s", "decode tok/s", True),
    ("ttft_ms", "TTFT ms", False),
    ("total_ms", "total time ms", False),
)


def bootstrap_ratio(
    a: Sequence[float], b: Sequence[float], *, seed: int, resamples: int = RESAMPLES, confidence: float = CONFIDENCE
) -> tuple[float, float, float] | None:
    """(ratio of medians B/A, low, high) of the percentile bootstrap, widened by RESOLUTION; None
    when an arm is empty or A's median is 0."""
    if not a or not b or statistics.median(a) == 0:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        ma = statistics.median(rng.choices(a, k=len(a)))
        mb = statistics.median(rng.choices(b, k=len(b)))
        if ma:
            ratios.append(mb / ma)
    tail = round(100 * (1 - confidence) / 2, 6)  # 2.5 for 95 %
    low, high = percentile(ratios, tail), percentile(ratios, 100 - tail)
    return statistics.median(b) / statistics.median(a), low * (1 - RESOLUTION), high * (1 + RESOLUTION)


def word(ratio: float, low: float, high: float, *, higher_is_better: bool) -> str:
    """'faster', 'slower' or 'no difference within noise' for B against A."""
    if low <= 1 <= high or abs(ratio - 1) < MIN_EFFECT:
        return "no difference within noise"
    b_higher = low > 1
    return "faster" if b_higher == higher_is_better else "slower"


def verdict(values: dict[str, dict[str, list[float | None]]], *, seed: int) -> dict[str, dict[str, Any]]:
    """VALUES: {figure: {"A": [...], "B": [...]}} of valid repetitions → {figure: result}."""
    out: dict[str, dict[str, Any]] = {}
    for key, label, higher in FIGURES:
        arms = values.get(key) or {}
        a, b = [v for v in arms.get("A", ()) if v is not None], [v for v in arms.get("B", ()) if v is not None]
        result = bootstrap_ratio(a, b, seed=seed)
        row: dict[str, Any] = {
            "label": label,
            "higher_is_better": higher,
            "median_a": statistics.median(a) if a else None,
            "median_b": statistics.median(b) if b else None,
            "n_a": len(a),
            "n_b": len(b),
        }
        if result is None:
            row.update(ratio=None, ci_low=None, ci_high=None, verdict="not measured")
        else:
            ratio, low, high = result
            row.update(ratio=ratio, ci_low=low, ci_high=high, verdict=word(ratio, low, high, higher_is_better=higher))
        out[key] = row
    return out
