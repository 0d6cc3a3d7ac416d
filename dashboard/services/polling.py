"""Polling services: engines (metrics), engine liveness probes, hosts — and storing it all.

Every engine of a cycle is fetched concurrently with a timeout below the interval, so a
hung engine costs its own poll, never the others'. A resident poller's tick (`metrics_tick`)
reads the host and all its engines first, signals them, and adds their rows to the
`PendingWrites` it stores every SPARKOPS_FLUSH_INTERVAL; without one (`poll --once`), a tick
is stored in one transaction and `dashboard.signals` go out after it commits."""
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
from dashboard.models import CollectorState, Engine, Host, KVPoolEntry, Series

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


def engines_fetch(*, engines, known=None):
    """Fetch every engine concurrently: (fetched, their collector states) for `engines_store`.
    KNOWN: collector states the caller kept from its last tick (only the others are read)."""
    states = _states(engines, known)
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


def _states(engines, known=None):
    known = known or {}
    keys = [f"{prefix}:{e.pk}" for e in engines for prefix in ("engine", "unit")]
    states = {key: known[key] for key in keys if key in known}
    missing = [key for key in keys if key not in states]
    if missing:
        states.update(CollectorState.objects.filter(key__in=missing).values_list("key", "data"))
    return states


def _needs_refresh(engine, state):
    static = state.get("static") or {}
    return engine.status != "up" or time.time() - static.get("t", 0) >= STATIC_REFRESH_S


def engine_poll(*, engine):
    return engines_poll(engines=[engine])[0]


def engines_store(*, engines, fetched, states, writes=None):
    """Derive, store samples, states and ledger rows, update the engines; signal after commit.
    WRITES: a `PendingWrites` the caller flushes and signals (samples, states and the engines'
    rows go there; a KV ledger row is written at once)."""
    readings = []
    if writes is not None:
        for engine, (snapshot, fetched_at) in zip(engines, fetched):
            readings.append(_engine_store_one(engine, snapshot, fetched_at, states, writes))
        return readings
    writes = PendingWrites()
    with transaction.atomic():
        for engine, (snapshot, fetched_at) in zip(engines, fetched):
            readings.append(_engine_store_one(engine, snapshot, fetched_at, states, writes))
        writes.flush()
        transaction.on_commit(writes.signal)
    return readings


def _engine_store_one(engine, snapshot, fetched_at, states, writes):
    now = datetime.fromtimestamp(fetched_at, tz=dt_timezone.utc)
    reading, new_state, values = _engine_reading(engine, snapshot, fetched_at, now, states)
    writes.batch.add_samples(ts=now, engine=engine, values=values)
    writes.batch.put_states({f"engine:{engine.pk}": new_state})
    first = engine.last_poll_at is None
    if _engine_apply(engine, reading, now) or first:  # a moved status, or a new engine's first reading
        writes.urgent = True
    writes.engines[engine.pk] = engine
    writes.polled.append((engine, reading))
    return reading


class PendingWrites:
    """A tick's (or several ticks') samples, collector states and engine and host rows, stored
    by `flush()` with one COPY, one upsert and two UPDATEs in one transaction; `signal()`
    sends the ticks' `host_polled`/`engines_polled`. `urgent`: a status moved, or an engine's
    or host's first reading: store it now."""

    def __init__(self):
        self.batch = store.WriteBatch()
        self.engines, self.hosts = {}, {}
        self.polled, self.host_readings = [], []
        self.urgent = False

    def __bool__(self):
        return bool(self.batch.samples or self.batch.states or self.engines or self.hosts)

    def flush(self):
        if self.batch.samples:  # an engine removed meanwhile took its series along: keep the others' samples
            alive = set(Series.objects.filter(pk__in={row[0] for row in self.batch.samples}).values_list("pk", flat=True))
            self.batch.samples = [row for row in self.batch.samples if row[0] in alive]
        with transaction.atomic(savepoint=False):
            self.batch.flush()
            if self.engines:
                Engine.objects.bulk_update(list(self.engines.values()), ENGINE_FIELDS)
            for host in self.hosts.values():
                Host.objects.filter(pk=host.pk).update(latest=host.latest, last_report_at=host.last_report_at)
        self.engines, self.hosts, self.urgent = {}, {}, False

    def signal(self):
        """Send (and forget) the readings gathered since the last call."""
        host_readings, polled = self.host_readings, self.polled
        self.host_readings, self.polled = [], []
        for host, reading in host_readings:
            signals.host_polled.send_robust(sender=Host, host=host, reading=reading)
        if polled:
            signals.engines_polled.send_robust(sender=Engine, polled=polled)


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
    """Update ENGINE from READING in memory; whether its status or reason moved."""
    engine.latest, engine.last_poll_at = reading, now
    if reading["up"]:
        engine.last_ok_at = now
    moved = engine.status != reading["status"] or engine.status_reason != (reading["error"] or "")
    if engine.status != reading["status"]:
        engine.status, engine.status_changed_at = reading["status"], now
    engine.status_reason = reading["error"] or ""
    return moved


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


def host_store(*, host, collected, writes=None):
    """Store a host reading: samples, states, Host.latest; `host_polled` after commit.
    WRITES: a `PendingWrites` the caller flushes and signals."""
    own = writes is None
    writes = PendingWrites() if own else writes
    writes.batch.add_samples(ts=collected.at, host=host, values=collected.values)
    writes.batch.put_states({f"host:{host.pk}": collected.state,
                             **{f"unit:{engine_id}": info for engine_id, info in collected.unit_infos.items()}})
    if host.last_report_at is None:
        writes.urgent = True  # its first report: the host is being watched, say so now
    host.latest, host.last_report_at = collected.reading, collected.at
    writes.hosts[host.pk] = host
    writes.host_readings.append((host, collected.reading))
    if own:
        with transaction.atomic():
            writes.flush()
            transaction.on_commit(writes.signal)


# --- one tick of a resident poller ---------------------------------------------------

def metrics_tick(*, host, host_engines, host_state, engines, states=None, writes=None):
    """HOST's sources and ENGINES' metrics, all read first (no transaction open while engines
    answer), then stored. HOST_STATE: the host's collector state as the last tick left it
    (None: read it); STATES: the engines' collector states likewise (those missing are read).
    WRITES: a `PendingWrites` kept across ticks: this tick's rows are added to it and the
    caller flushes it (it must when `writes.urgent`), and the readings are signalled now;
    None: stored in one transaction and signalled after it commits.
    Returns (the host's new state, the engines' readings, every collector state now)."""
    if host_state is None:
        host_state = store.state_get(f"host:{host.pk}")
    collected = host_collect(host=host, engines=host_engines, state=host_state)
    fetched, states = engines_fetch(engines=engines, known=states) if engines else ([], dict(states or {}))
    states.update({f"unit:{pk}": info for pk, info in collected.unit_infos.items()})  # this tick's unit facts
    own = writes is None
    writes = PendingWrites() if own else writes
    host_store(host=host, collected=collected, writes=writes)
    readings = engines_store(engines=engines, fetched=fetched, states=states, writes=writes) if engines else []
    states.update(writes.batch.states)
    if own:
        with transaction.atomic():
            writes.flush()
            transaction.on_commit(writes.signal)
    else:
        writes.signal()
    return collected.state, readings, states


# --- everything once (sparkops poll --once) ----------------------------------------

def poll_once(*, host_name=None):
    """Run every collector once: this host's sources, then all engines; the `poll --json` object."""
    host, _ = Host.objects.get_or_create(name=host_name or settings.SPARKOPS_HOST_NAME)
    host_reading = host_poll(host=host)
    readings = engines_poll(engines=Engine.objects.select_related("host"))
    return {"time": timezone.now().isoformat(), "engines": readings, "host": host_reading["host"],
            "gpus": host_reading["gpus"], "gpu_state": host_reading["gpu_state"],
            "processes": host_reading["processes"], "kernel_lines": host_reading["kernel_lines"]}

