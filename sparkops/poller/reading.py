"""An engine's reading, derived from what one poll fetched: the `poll --json` object, the
collector state carried to the next poll, the sample values, the KV-pool ledger rows to hold
(`kv_writes`) and Engine's row as the reading moves it (`engine_apply`). The ledger rows are
written only when `pending.PendingWrites.flush` calls the held writes, in its transaction."""

import logging
import time
from functools import partial
from typing import NamedTuple

from dashboard.models import Engine, KVPoolEntry
from sparkops.collectors import collector_for, contract, own
from sparkops.collectors.derive import SAMPLE_METRICS, EngineReading, derive, kv_changed
from sparkops.poller.fetch import StateKey

log = logging.getLogger(__name__)


def _carry_static(snapshot, state, slow):
    """Models, window, the engine's account and what was wrong with the slow endpoints (SLOW:
    their names) from the last refresh, when this poll skipped them."""
    static = state.get("static") or {}
    if snapshot.info.get("refreshed"):
        problems = {name: text for name, text in (snapshot.info.get("problems") or {}).items() if name in slow}
        return {
            "t": time.time(),
            "models": snapshot.models,
            "problems": problems,
            "retry": [name for name in snapshot.info.get("retry") or () if name in problems],
            "kv": {k: v for k, v in snapshot.kv.items() if v is not None},
            "account": snapshot.account,
        }
    if not snapshot.models:
        snapshot.models = static.get("models") or []
    for key, value in (static.get("kv") or {}).items():
        if snapshot.kv.get(key) is None:
            snapshot.kv[key] = value
    if not snapshot.error and static.get("problems"):
        snapshot.error = "; ".join(static["problems"].values())  # still true until the next refresh
    return static


class EnginePoll(NamedTuple):
    """What one poll of an engine yields."""

    reading: EngineReading  # one engine object as `poll --json` prints it
    state: dict  # the engine's new collector state
    values: dict  # {metric: number} for the sample store


def engine_reading(engine, snapshot, fetched_at, now, states, *, kv_writes) -> EnginePoll:
    """KV_WRITES: where the KV-pool ledger writes this reading calls for are held."""
    state = states.get(StateKey("engine", engine.pk)) or {}
    unit_info = states.get(StateKey("unit", engine.pk)) or {}
    static = _carry_static(snapshot, state, collector_for(engine.kind).slow) if snapshot.up else {}
    reading, new_state = derive(snapshot, state, now=fetched_at, name=engine.name, kind=engine.kind)
    reading["unit"], reading["fatal_lines"] = unit_info.get("unit"), unit_info.get("fatal_lines") or []
    metrics = snapshot.contract if snapshot.up else {}
    reading["contract"], new_state["contract"] = contract.derive(
        metrics,
        state.get("contract") or {},
        now=fetched_at,
        window=snapshot.kv.get("window"),
        journal=unit_info.get("contract"),
        own=own.counts(engine.url) if metrics else None,  # the operator's traffic is judged, not SparkOps's
    )
    kv = _kv_facts(unit_info.get("boot") or {}, snapshot.kv)
    if reading["kv_pool_tokens"] is None and kv.get("pool_tokens"):
        reading["kv_pool_tokens"] = kv["pool_tokens"]  # from vLLM's boot line when the metric lacks it
    values = {m: reading.get(m) for m in SAMPLE_METRICS} if snapshot.up else {}
    values["up"] = 1.0 if snapshot.up else 0.0
    if reading["restarted"]:
        values["restarts"] = 1.0
        static = {}  # a restart may change the model list and window: re-read them next poll
        log.info("engine %s restarted (a counter went down)", engine.name)
    if snapshot.up:
        new_state["kv"] = _kv_ledger(engine, kv, (state.get("kv") or {}), now, kv_writes)
        new_state["static"] = static
    return EnginePoll(reading, new_state, values)


def _kv_facts(boot, metrics):
    """The KV-pool facts of this boot: the metrics' over the journal's boot lines. The KV memory
    comes only from the boot lines (vLLM's cache_config_info label is the --kv-cache-memory-bytes
    flag, "None" unless set), and only when the journal's pool is the pool the metrics show: a
    line of the previous boot must not be credited to this one."""
    kv = {**boot, **{k: v for k, v in metrics.items() if v is not None}}
    if boot.get("kv_memory_bytes") and not metrics.get("kv_memory_bytes"):
        same = boot.get("pool_tokens") is not None and boot.get("pool_tokens") == kv.get("pool_tokens")
        if not same:
            kv.pop("kv_memory_bytes")
    return kv


def _kv_ledger(engine, kv, before, now, writes):
    """Hold (in WRITES) a KV-pool ledger row when the pool, window or memory share changed
    (before → after), or the first pool of an engine with none; the new KV state."""
    facts = {k: kv.get(k) for k in ("pool_tokens", "window", "memory_share", "kv_memory_bytes", "concurrency")}
    if not facts["pool_tokens"]:
        return before
    changed = kv_changed(before, facts)
    if changed or not before:
        note = "; ".join(f"{k}: {before[k]} → {facts[k]}" for k in changed) or "first pool seen by the collector"
        writes.append(partial(_kv_row, engine, facts, recorded_at=now, note=note, unless_known=not changed))
    elif facts["kv_memory_bytes"] and not before.get("kv_memory_bytes"):
        writes.append(partial(_kv_memory_late, engine, facts))
    return {**before, **{k: v for k, v in facts.items() if v is not None}}


def _kv_row(engine, facts, *, recorded_at, note, unless_known):
    """Store one held ledger row after the engine's latest. UNLESS_KNOWN (no pool was known to
    the collector's state): only when the engine has no row yet, else a late KV memory line
    completes the latest row. An engine deleted since it was read has no row (the store goes on)."""
    if not Engine.objects.filter(pk=engine.pk).exists():
        return
    if unless_known and KVPoolEntry.objects.filter(engine=engine).exists():
        if facts["kv_memory_bytes"]:
            _kv_memory_late(engine, facts)
        return
    previous = KVPoolEntry.objects.filter(engine=engine).order_by("-recorded_at").first()
    KVPoolEntry.objects.create(
        engine=engine,
        recorded_at=recorded_at,
        previous=previous,
        source=KVPoolEntry.Source.COLLECTOR,
        note=note,
        **{k: v for k, v in facts.items() if v is not None},
    )


def _kv_memory_late(engine, facts):
    """The journal's KV memory line read after the row of its boot was written (the journal is
    read every few seconds, the metrics every poll): complete that row, once."""
    KVPoolEntry.objects.filter(
        pk__in=KVPoolEntry.objects.filter(engine=engine).order_by("-recorded_at", "-id").values("pk")[:1],
        source=KVPoolEntry.Source.COLLECTOR,
        pool_tokens=facts["pool_tokens"],
        kv_memory_bytes__isnull=True,
    ).update(kv_memory_bytes=facts["kv_memory_bytes"])


ENGINE_FIELDS = ["latest", "last_poll_at", "last_ok_at", "status", "status_reason", "status_changed_at"]


def engine_apply(engine, reading: EngineReading, now):
    """Update ENGINE from READING in memory; whether its status or reason moved."""
    engine.latest, engine.last_poll_at = reading, now
    if reading["up"]:
        engine.last_ok_at = now
    moved = engine.status != reading["status"] or engine.status_reason != (reading["error"] or "")
    if engine.status != reading["status"]:
        engine.status, engine.status_changed_at = reading["status"], now
    engine.status_reason = reading["error"] or ""
    return moved
