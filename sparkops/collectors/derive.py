"""Arithmetic across polls, the same for every engine kind: counters → rates, the
prefix-cache hit rate over a window, latency quantiles from histogram deltas, and restarts.

A counter that goes down means the engine restarted: the poll is marked `restarted`,
the baselines start over and no rate is computed — never a negative rate."""

from collections.abc import Mapping
from typing import Any, Literal, TypedDict, cast

from sparkops.collectors import prom
from sparkops.collectors.base import Snapshot

HIT_RATE_WINDOW_S = 60.0


class DerivedReading(TypedDict):
    """What `derive` makes of one poll: every key is there, None where the poll could not tell
    (an engine down has its name, kind, status and error). The order is `poll --json`'s."""

    name: str
    kind: str
    up: bool
    status: str  # up | loading | down
    error: str | None
    models: list[str]
    requests_running: float | None
    requests_waiting: float | None
    kv_cache_usage: float | None  # 0..1
    kv_pool_tokens: int | None
    prefix_cache_queries_total: float | None
    prefix_cache_hits_total: float | None
    prefix_cache_hit_rate: float | None  # over HIT_RATE_WINDOW_S
    prompt_tokens_total: float | None
    generation_tokens_total: float | None
    prompt_tokens_per_s: float | None
    generation_tokens_per_s: float | None
    preemptions_per_s: float | None
    spec_acceptance_rate: float | None
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    itl_p50_s: float | None
    itl_p95_s: float | None
    window: int | None
    restarted: bool  # a counter went down since the last poll
    unit: dict[str, Any] | None  # the engine's unit as the host reading's `systemctl show` read it
    fatal_lines: list[dict[str, Any]]  # the journal's (systemd.fatal_line)


class EngineReading(DerivedReading, total=False):
    """One engine's reading as the poller hands it on (`poll --json`'s engine object, Engine.latest,
    the alert rules' `reading`): `derive`'s, and what the poller adds after it."""

    contract: dict[str, Any]  # contract.derive's: finished requests, prompt and e2e latency, journal
    audit_failing: int  # failing launch-audit checks, as the last observation found them
    audit_applied: int  # fixes in the unit, not yet in what runs (they take effect at the next restart)
    watched: str  # how a death is seen: at once (exit watch) or by the probe


# The keys `derive` fills, in order: an engine's reading starts with each of them None.
READING_KEYS = tuple(DerivedReading.__annotations__)
RateKey = Literal["prompt_tokens_per_s", "generation_tokens_per_s", "preemptions_per_s"]
RATE_COUNTERS: dict[RateKey, str] = {
    "prompt_tokens_per_s": "prompt_tokens_total",
    "generation_tokens_per_s": "generation_tokens_total",
    "preemptions_per_s": "preemptions_total",
}
# The latency histograms' quantiles: {histogram: (p50 key, p95 key)}.
QUANTILE_KEYS: dict[str, tuple[Literal["ttft_p50_s", "itl_p50_s"], Literal["ttft_p95_s", "itl_p95_s"]]] = {
    "ttft": ("ttft_p50_s", "ttft_p95_s"),
    "itl": ("itl_p50_s", "itl_p95_s"),
}
# Engine numbers that become samples (Series.metric names of the sample-store contract).
SAMPLE_METRICS = (
    "requests_running",
    "requests_waiting",
    "kv_cache_usage",
    "prefix_cache_hit_rate",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "ttft_p50_s",
    "ttft_p95_s",
    "itl_p50_s",
    "itl_p95_s",
    "preemptions_per_s",
    "kv_pool_tokens",
)


def empty_reading(*, name: str, kind: str) -> EngineReading:
    # Every key, None until set: the cast is what fromkeys cannot say.
    reading = cast(EngineReading, dict.fromkeys(READING_KEYS))
    reading.update(
        {"name": name, "kind": kind, "up": False, "status": "down", "models": [], "restarted": False, "fatal_lines": []}
    )
    return reading


def went_down(now: Mapping[str, float], before: Mapping[str, float]) -> bool:
    return any(before.get(k) is not None and v is not None and v < before[k] for k, v in now.items())


def derive(
    snapshot: Snapshot, state: dict[str, Any], *, now: float, name: str, kind: str
) -> tuple[EngineReading, dict[str, Any]]:
    """Return (reading, new_state). `state` is the previous poll's state dict ({} at first)."""
    reading = empty_reading(name=name, kind=kind)
    reading.update({"up": snapshot.up, "status": snapshot.status, "error": snapshot.error, "models": snapshot.models})
    if not snapshot.up:
        return reading, state  # keep the baselines: a lower counter after the outage is a restart
    gauges = snapshot.gauges
    reading.update(
        {
            "requests_running": gauges.get("requests_running"),
            "requests_waiting": gauges.get("requests_waiting"),
            "kv_cache_usage": gauges.get("kv_cache_usage"),
        }
    )
    counters = {k: v for k, v in snapshot.counters.items() if v is not None}
    reading.update(
        {
            "prefix_cache_queries_total": counters.get("prefix_cache_queries_total"),
            "prefix_cache_hits_total": counters.get("prefix_cache_hits_total"),
            "prompt_tokens_total": counters.get("prompt_tokens_total"),
            "generation_tokens_total": counters.get("generation_tokens_total"),
        }
    )
    reading["kv_pool_tokens"] = snapshot.kv.get("pool_tokens")
    reading["window"] = snapshot.kv.get("window")
    before = state.get("counters") or {}
    restarted = went_down(counters, before)
    ring = [] if restarted else list(state.get("ring") or [])
    if not restarted and state.get("t") is not None:
        _rates(reading, counters, before, now - state["t"])
        _quantiles(reading, snapshot.hists, state.get("hists") or {})
    reading["restarted"] = restarted
    reading["prefix_cache_hit_rate"], ring = _hit_rate(ring, counters, now)
    new_state = {
        "t": now,
        "counters": counters,
        "ring": ring,
        "hists": {k: {str(le): c for le, c in v.items()} for k, v in snapshot.hists.items() if v},
    }
    return reading, new_state


def _rates(reading: EngineReading, counters: Mapping[str, float], before: Mapping[str, float], dt: float) -> None:
    if dt <= 0:
        return
    for out, key in RATE_COUNTERS.items():
        if counters.get(key) is not None and before.get(key) is not None:
            reading[out] = (counters[key] - before[key]) / dt
    drafted = _delta(counters, before, "spec_draft_tokens_total")
    if drafted:
        reading["spec_acceptance_rate"] = (_delta(counters, before, "spec_accepted_tokens_total") or 0) / drafted


def _delta(now: Mapping[str, float], before: Mapping[str, float], key: str) -> float | None:
    if now.get(key) is None or before.get(key) is None:
        return None
    return now[key] - before[key]


def _quantiles(
    reading: EngineReading, hists: Mapping[str, prom.Buckets], before: Mapping[str, Mapping[str, float]]
) -> None:
    for short, (p50, p95) in QUANTILE_KEYS.items():
        old = {float(le): c for le, c in (before.get(short) or {}).items()}
        delta = prom.delta_buckets(hists.get(short) or {}, old)
        if delta:
            reading[p50] = prom.quantile(0.5, delta)
            reading[p95] = prom.quantile(0.95, delta)


def _hit_rate(
    ring: list[list[float]], counters: Mapping[str, float], now: float
) -> tuple[float | None, list[list[float]]]:
    queries, hits = counters.get("prefix_cache_queries_total"), counters.get("prefix_cache_hits_total")
    if queries is None or hits is None:
        return None, []
    ring = [p for p in ring if now - p[0] <= HIT_RATE_WINDOW_S] + [[now, queries, hits]]
    d_queries = ring[-1][1] - ring[0][1]
    rate = (ring[-1][2] - ring[0][2]) / d_queries if d_queries > 0 else None
    return (min(max(rate, 0.0), 1.0) if rate is not None else None), ring


def kv_changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Which KV-pool facts changed between two known readings (pool, window, memory share)."""
    keys = ("pool_tokens", "window", "memory_share")
    return [k for k in keys if before.get(k) is not None and after.get(k) is not None and before[k] != after[k]]
