"""Polling services: engines (metrics), engine liveness probes, hosts — and storing it all.

Every engine of a cycle is fetched concurrently with a timeout below the interval, so a
hung engine costs its own poll, never the others'. A resident poller's tick (`metrics_tick`)
reads the host and all its engines first, then writes everything in one transaction;
`dashboard.signals` go out only after it commits."""
import asyncio
import logging
import time
from datetime import datetime, timezone as dt_timezone
from typing import NamedTuple

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from dashboard import http, signals
from dashboard.collectors import collector_for, runner, store
from dashboard.collectors.base import describe
from dashboard.collectors.derive import SAMPLE_METRICS, derive, kv_changed
from dashboard.collectors.hostread import host_read
from dashboard.models import CollectorState, Engine, Host, KVPoolEntry

log = logging.getLogger(__name__)
RECHECK_DELAY_S = 0.3


def poll_timeout(engine=None):
    """Below the interval, so a poll is over before the next one is due."""
    interval = (engine.poll_interval_s if engine and engine.poll_interval_s else None) or settings.SPARKOPS_POLL_INTERVAL
    return max(0.2, min(interval * 0.75, 5.0))


def probe_timeout():
    return max(0.2, min(settings.SPARKOPS_LIVENESS_INTERVAL * 0.6, 2.0))


# --- engines: metrics ----------------------------------------------------------------
STATIC_REFRESH_S = 60.0  # model list / props: re-read at least this often, and after any outage


def engines_poll(*, engines):
    """Fetch every engine concurrently, then store all readings in one transaction."""
    engines = list(engines)
    if not engines:
        return []
    fetched, states = engines_fetch(engines=engines)
    return engines_store(engines=engines, fetched=fetched, states=states)


def engines_fetch(*, engines):
    """Fetch every engine concurrently: (fetched, their collector states) for `engines_store`."""
    states = _states(engines)
    refresh = {e.pk: _needs_refresh(e, states.get(f"engine:{e.pk}") or {}) for e in engines}

    async def fetch_all(client):
        return await asyncio.gather(*(_fetch(client, e, refresh[e.pk], _static_kv(states, e)) for e in engines))

    return runner.run(fetch_all), states


async def _fetch(client, engine, refresh=True, static_kv=None):
    coll = collector_for(engine.kind)
    bodies = await coll.fetch(client, engine.base_url, timeout=poll_timeout(engine), refresh=refresh)
    snap = coll.snapshot(bodies)
    if not refresh and snap.up and _static_stale(snap.kv, static_kv or {}):
        # The pool changed between two polls: the engine restarted faster than the probe saw,
        # so the window and models carried from before may be wrong too. Re-read them now.
        refresh = True
        snap = coll.snapshot(await coll.fetch(client, engine.base_url, timeout=poll_timeout(engine), refresh=True))
    snap.info["refreshed"] = refresh
    return snap, time.time()


def _static_kv(states, engine):
    return ((states.get(f"engine:{engine.pk}") or {}).get("static") or {}).get("kv") or {}


def _static_stale(fresh_kv, static_kv):
    return any(value is not None and key in static_kv and static_kv[key] != value for key, value in fresh_kv.items())


def _states(engines):
    keys = [f"{prefix}:{e.pk}" for e in engines for prefix in ("engine", "unit")]
    return dict(CollectorState.objects.filter(key__in=keys).values_list("key", "data"))


def _needs_refresh(engine, state):
    static = state.get("static") or {}
    return engine.status != "up" or time.time() - static.get("t", 0) >= STATIC_REFRESH_S


def engine_poll(*, engine):
    return engines_poll(engines=[engine])[0]


def engines_store(*, engines, fetched, states, batch=None):
    """Derive, store samples, states and ledger rows, update the engines; signal after commit.
    BATCH: a store.WriteBatch the caller flushes (samples and states go there, not to the database)."""
    readings, own = [], batch is None
    batch = store.WriteBatch() if own else batch
    with transaction.atomic(savepoint=False):  # inside metrics_tick's transaction: no savepoint round trips
        for engine, (snapshot, fetched_at) in zip(engines, fetched):
            now = datetime.fromtimestamp(fetched_at, tz=dt_timezone.utc)
            reading, new_state, values = _engine_reading(engine, snapshot, fetched_at, now, states)
            readings.append(reading)
            batch.add_samples(ts=now, engine=engine, values=values)
            batch.put_states({f"engine:{engine.pk}": new_state})
            _engine_apply(engine, reading, now)
        if own:
            batch.flush()
        Engine.objects.bulk_update(engines, ENGINE_FIELDS)
        transaction.on_commit(lambda: _signal_polled(engines, readings))
    return readings


def _signal_polled(engines, readings):
    signals.engines_polled.send_robust(sender=Engine, polled=list(zip(engines, readings)))


def _carry_static(snapshot, state):
    """Models and window from the last refresh when this poll skipped the slow endpoints."""
    static = state.get("static") or {}
    if snapshot.info.get("refreshed"):
        return {"t": time.time(), "models": snapshot.models, "kv": {k: v for k, v in snapshot.kv.items() if v is not None}}
    if not snapshot.models:
        snapshot.models = static.get("models") or []
    for key, value in (static.get("kv") or {}).items():
        if snapshot.kv.get(key) is None:
            snapshot.kv[key] = value
    return static


def _engine_reading(engine, snapshot, fetched_at, now, states):
    state = states.get(f"engine:{engine.pk}") or {}
    unit_info = states.get(f"unit:{engine.pk}") or {}
    static = _carry_static(snapshot, state) if snapshot.up else {}
    reading, new_state = derive(snapshot, state, now=fetched_at, name=engine.name, kind=engine.kind)
    reading["unit"], reading["fatal_lines"] = unit_info.get("unit"), unit_info.get("fatal_lines") or []
    kv = {**(unit_info.get("boot") or {}), **{k: v for k, v in snapshot.kv.items() if v is not None}}
    if reading["kv_pool_tokens"] is None and kv.get("pool_tokens"):
        reading["kv_pool_tokens"] = kv["pool_tokens"]  # from vLLM's boot line when the metric lacks it
    values = {m: reading.get(m) for m in SAMPLE_METRICS} if snapshot.up else {}
    values["up"] = 1.0 if snapshot.up else 0.0
    if reading["restarted"]:
        values["restarts"] = 1.0
        static = {}  # a restart may change the model list and window: re-read them next poll
        log.info("engine %s restarted (a counter went down)", engine.name)
    if snapshot.up:
        new_state["kv"] = _kv_ledger(engine, kv, (state.get("kv") or {}), now)
        new_state["static"] = static
    return reading, new_state, values


def _kv_ledger(engine, kv, before, now):
    """Add a KV-pool ledger row when the pool, window or memory share changed (before → after)."""
    facts = {k: kv.get(k) for k in ("pool_tokens", "window", "memory_share", "kv_memory_bytes", "concurrency")}
    if not facts["pool_tokens"]:
        return before
    changed = kv_changed(before, facts)
    first = not before and not KVPoolEntry.objects.filter(engine=engine).exists()
    if changed or first:
        previous = KVPoolEntry.objects.filter(engine=engine).order_by("-recorded_at").first()
        note = "; ".join(f"{k}: {before[k]} → {facts[k]}" for k in changed) or "first pool seen by the collector"
        KVPoolEntry.objects.create(engine=engine, recorded_at=now, previous=previous,
                                   source=KVPoolEntry.Source.COLLECTOR, note=note,
                                   **{k: v for k, v in facts.items() if v is not None})
    return {**before, **{k: v for k, v in facts.items() if v is not None}}


ENGINE_FIELDS = ["latest", "last_poll_at", "last_ok_at", "status", "status_reason", "status_changed_at"]


def _engine_apply(engine, reading, now):
    engine.latest, engine.last_poll_at = reading, now
    if reading["up"]:
        engine.last_ok_at = now
    if engine.status != reading["status"]:
        engine.status, engine.status_changed_at = reading["status"], now
    engine.status_reason = reading["error"] or ""


# --- engines: liveness ---------------------------------------------------------------

def engines_probe(*, engines):
    """Cheap liveness probe of every engine; a failed probe is re-checked ~0.3 s later."""
    engines = list(engines)
    if not engines:
        return []

    async def probe_all(client):
        return await asyncio.gather(*(_probe_twice(client, e) for e in engines))

    results = runner.run(probe_all)
    return [engine_record_liveness(engine=e, **r) for e, r in zip(engines, results)]


async def _probe_once(client, engine):
    coll = collector_for(engine.kind)
    try:
        resp = await http.aget(client, engine.base_url + coll.liveness_path, timeout=probe_timeout(),
                               ok_statuses=coll.probe_ok_statuses, max_bytes=256 * 1024)
    except http.HttpError as exc:
        return "down", f"{coll.liveness_path}: {describe(exc)}"
    if resp.status in coll.probe_ok_statuses:
        return "loading", f"{coll.liveness_path}: HTTP {resp.status} (loading)"
    return "up", ""


async def _probe_twice(client, engine):
    status, reason = await _probe_once(client, engine)
    rechecked = False
    if status == "down":  # one lost packet or a busy accept queue must not page anyone
        await asyncio.sleep(RECHECK_DELAY_S)
        status, reason = await _probe_once(client, engine)
        rechecked = True
    return {"status": status, "reason": reason, "rechecked": rechecked, "checked_at": timezone.now()}


def engine_record_liveness(*, engine, status, reason, rechecked, checked_at):
    """Move Engine.status only when it changed (a conditional UPDATE); always signal, saying
    whether it changed so receivers can skip the common "still up" case cheaply."""
    changed = engine.status != status
    if changed:
        with transaction.atomic():
            Engine.objects.filter(pk=engine.pk).update(status=status, status_reason=reason, status_changed_at=checked_at)
            engine.status, engine.status_reason, engine.status_changed_at = status, reason, checked_at
    up = status == "up"
    signals.engine_liveness.send_robust(sender=Engine, engine=engine, up=up, reason=reason, checked_at=checked_at,
                                        rechecked=rechecked, status=status, changed=changed)
    return {"engine": engine.name, "status": status, "up": up, "reason": reason, "rechecked": rechecked}


# --- hosts ---------------------------------------------------------------------------

def host_poll(*, host):
    """Read every host-local source (must run on that host) and store it."""
    engines = list(Engine.objects.filter(host=host).only("pk", "name", "unit", "unit_scope", "host_id"))
    collected = host_collect(host=host, engines=engines, state=store.state_get(f"host:{host.pk}"))
    host_store(host=host, collected=collected)
    return collected.reading


class HostCollected(NamedTuple):
    at: datetime
    reading: dict  # host, gpus, processes, units… as `poll --json` prints them
    values: dict  # sample values
    unit_infos: dict  # engine id -> {"unit", "fatal_lines", "boot"}
    state: dict  # the host's new collector state


def host_collect(*, host, engines, state):
    """Read HOST's sources (no database): ENGINES' units and journals, STATE as the last poll left it."""
    now = timezone.now()
    reading, values, unit_infos, new_state = host_read(engines=engines, state=state, now=now.timestamp())
    return HostCollected(now, reading, values, unit_infos, new_state)


def host_store(*, host, collected, batch=None):
    """Store a host reading: samples, states, Host.latest; `host_polled` after commit.
    BATCH: a store.WriteBatch the caller flushes (samples and states go there)."""
    now, reading, own = collected.at, collected.reading, batch is None
    batch = store.WriteBatch() if own else batch
    with transaction.atomic(savepoint=False):  # inside metrics_tick's transaction: no savepoint round trips
        batch.add_samples(ts=now, host=host, values=collected.values)
        batch.put_states({f"host:{host.pk}": collected.state,
                          **{f"unit:{engine_id}": info for engine_id, info in collected.unit_infos.items()}})
        if own:
            batch.flush()
        Host.objects.filter(pk=host.pk).update(latest=reading, last_report_at=now)
        host.latest, host.last_report_at = reading, now
        transaction.on_commit(lambda: signals.host_polled.send_robust(sender=Host, host=host, reading=reading))


# --- one tick of a resident poller ---------------------------------------------------

def metrics_tick(*, host, host_engines, host_state, engines):
    """HOST's sources and ENGINES' metrics, all read first (no transaction open while engines
    answer), then stored in one transaction. HOST_STATE: the host's collector state as the
    last tick left it (None: read it). Returns (the host's new state, the engines' readings)."""
    if host_state is None:
        host_state = store.state_get(f"host:{host.pk}")
    collected = host_collect(host=host, engines=host_engines, state=host_state)
    fetched, states = engines_fetch(engines=engines) if engines else ([], {})
    states.update({f"unit:{pk}": info for pk, info in collected.unit_infos.items()})  # this tick's unit facts
    batch = store.WriteBatch()  # one INSERT of samples and one upsert of states for the whole tick
    with transaction.atomic():
        host_store(host=host, collected=collected, batch=batch)
        readings = engines_store(engines=engines, fetched=fetched, states=states, batch=batch) if engines else []
        batch.flush()
    return collected.state, readings


# --- everything once (sparkops poll --once) ----------------------------------------

def poll_once(*, host_name=None):
    """Run every collector once: this host's sources, then all engines; the `poll --json` object."""
    host, _ = Host.objects.get_or_create(name=host_name or settings.SPARKOPS_HOST_NAME)
    host_reading = host_poll(host=host)
    readings = engines_poll(engines=Engine.objects.select_related("host"))
    return {"time": timezone.now().isoformat(), "engines": readings, "host": host_reading["host"],
            "gpus": host_reading["gpus"], "gpu_state": host_reading["gpu_state"],
            "processes": host_reading["processes"], "kernel_lines": host_reading["kernel_lines"]}

