"""Arithmetic across polls, the same for every engine kind: counters → rates, the
prefix-cache hit rate over a window, latency quantiles from histogram deltas, and restarts.

A counter that goes down means the engine restarted: the poll is marked `restarted`,
the baselines start over and no rate is computed — never a negative rate."""

from dashboard.collectors import prom

HIT_RATE_WINDOW_S = 60.0
RATE_COUNTERS = {
    "prompt_tokens_per_s": "prompt_tokens_total",
    "generation_tokens_per_s": "generation_tokens_total",
    "preemptions_per_s": "preemptions_total",
}
READING_KEYS = (
    "name",
    "kind",
    "up",
    "status",
    "error",
    "models",
    "requests_running",
    "requests_waiting",
    "kv_cache_usage",
    "kv_pool_tokens",
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
    "prefix_cache_hit_rate",
    "prompt_tokens_total",
    "generation_tokens_total",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "preemptions_per_s",
    "spec_acceptance_rate",
    "ttft_p50_s",
    "ttft_p95_s",
    "itl_p50_s",
    "itl_p95_s",
    "window",
    "restarted",
    "unit",
    "fatal_lines",
)
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


def empty_reading(*, name, kind):
    reading = dict.fromkeys(READING_KEYS)
    reading.update(name=name, kind=kind, up=False, status="down", models=[], restarted=False, fatal_lines=[])
    return reading


def went_down(now, before):
    return any(before.get(k) is not None and v is not None and v < before[k] for k, v in now.items())


def derive(snapshot, state, *, now, name, kind):
    """Return (reading, new_state). `state` is the previous poll's state dict ({} at first)."""
    reading = empty_reading(name=name, kind=kind)
    reading.update(up=snapshot.up, status=snapshot.status, error=snapshot.error, models=snapshot.models)
    if not snapshot.up:
        return reading, state  # keep the baselines: a lower counter after the outage is a restart
    reading.update({k: snapshot.gauges.get(k) for k in ("requests_running", "requests_waiting", "kv_cache_usage")})
    counters = {k: v for k, v in snapshot.counters.items() if v is not None}
    reading.update(
        {
            k: counters.get(k)
            for k in (
                "prefix_cache_queries_total",
                "prefix_cache_hits_total",
                "prompt_tokens_total",
                "generation_tokens_total",
            )
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


def _rates(reading, counters, before, dt):
    if dt <= 0:
        return
    for out, key in RATE_COUNTERS.items():
        if counters.get(key) is not None and before.get(key) is not None:
            reading[out] = (counters[key] - before[key]) / dt
    drafted = _delta(counters, before, "spec_draft_tokens_total")
    if drafted:
        reading["spec_acceptance_rate"] = (_delta(counters, before, "spec_accepted_tokens_total") or 0) / drafted


def _delta(now, before, key):
    if now.get(key) is None or before.get(key) is None:
        return None
    return now[key] - before[key]


def _quantiles(reading, hists, before):
    for short in ("ttft", "itl"):
        old = {float(le): c for le, c in (before.get(short) or {}).items()}
        delta = prom.delta_buckets(hists.get(short) or {}, old)
        if delta:
            reading[f"{short}_p50_s"] = prom.quantile(0.5, delta)
            reading[f"{short}_p95_s"] = prom.quantile(0.95, delta)


def _hit_rate(ring, counters, now):
    queries, hits = counters.get("prefix_cache_queries_total"), counters.get("prefix_cache_hits_total")
    if queries is None or hits is None:
        return None, []
    ring = [p for p in ring if now - p[0] <= HIT_RATE_WINDOW_S] + [[now, queries, hits]]
    d_queries = ring[-1][1] - ring[0][1]
    rate = (ring[-1][2] - ring[0][2]) / d_queries if d_queries > 0 else None
    return (min(max(rate, 0.0), 1.0) if rate is not None else None), ring


def kv_changed(before, after):
    """Which KV-pool facts changed between two known readings (pool, window, memory share)."""
    keys = ("pool_tokens", "window", "memory_share")
    return [k for k in keys if before.get(k) is not None and after.get(k) is not None and before[k] != after[k]]
