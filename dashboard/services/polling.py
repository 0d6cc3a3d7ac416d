"""What one poll does to one engine or host: fetch it, derive its reading, hold its rows.

The resident poller (`dashboard/services/resident.py`) calls these in order each tick:
`host_collect` and `engines_fetch` read (no transaction open while engines answer), then
`PendingWrites.add_host` / `add_engine` derive the readings and hold their rows, and
`PendingWrites.flush` stores what is held in one transaction. Every engine of a tick is
fetched concurrently with a timeout below the interval, so a hung engine costs its own poll,
never the others'. The liveness probes are `engines_probe`."""

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, NamedTuple

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from dashboard import clock, http
from dashboard.collectors import collector_for, contract, own, runner, store, unitnow
from dashboard.collectors.base import Snapshot, describe
from dashboard.collectors.derive import SAMPLE_METRICS, derive, kv_changed
from dashboard.collectors.hostread import host_read
from dashboard.models import CollectorState, Engine, Host, KVPoolEntry, Series

log = logging.getLogger(__name__)
RECHECK_DELAY_S = 0.3


def poll_timeout(engine=None):
    """Below the interval, so a poll is over before the next one is due."""
    interval = (
        engine.poll_interval_s if engine and engine.poll_interval_s else None
    ) or settings.SPARKOPS_POLL_INTERVAL
    return max(0.2, min(interval * 0.75, 5.0))


def probe_timeout():
    return max(0.2, min(settings.SPARKOPS_LIVENESS_INTERVAL * 0.6, 2.0))


# --- engines: metrics ----------------------------------------------------------------
STATIC_REFRESH_S = 60.0  # model list / props: re-read at least this often, and after any outage


class StateKey(NamedTuple):
    """Whose collector state: an engine's metrics, its unit's facts, or a host's sources.
    `str()` is its CollectorState row's key ("engine:12")."""

    source: str  # "engine" | "unit" | "host"
    pk: int

    def __str__(self):
        return f"{self.source}:{self.pk}"


States = dict[StateKey, dict]


class Fetched(NamedTuple):
    """One engine's answer and when it came (epoch seconds)."""

    snapshot: Snapshot
    at: float


class InFlight:
    """A poller's engine fetches still running, kept across ticks on its event loop: a tick
    waits `wait_s` for its engines, takes what answered, and collects the others at a later
    tick, so one slow or hung engine (bounded by its own poll timeout) never delays the
    readings of the others or the tick's cadence."""

    def __init__(self):
        self.tasks: dict[int, tuple[Engine, asyncio.Task]] = {}


def engines_fetch(
    *,
    engines,
    states: States,
    inflight: InFlight | None = None,
    wait_s: float | None = None,
    refresh_now: frozenset[int] | set[int] = frozenset(),
) -> list[tuple[Engine, Fetched]]:
    """Fetch ENGINES concurrently: (engine, Fetched) for each answer in hand. STATES: the
    collector states the caller keeps; those of ENGINES it lacks are read from the database
    into it. INFLIGHT and WAIT_S (a resident poller): wait at most that long, keep the fetches
    still running for a later call, and return too those of earlier calls that ended since;
    an engine with a fetch in flight is not fetched again. Without: wait for every answer.
    REFRESH_NOW: ids of engines whose slow endpoints are read this time whatever their age."""
    inflight = inflight if inflight is not None else InFlight()
    engines = [e for e in engines if e.pk not in inflight.tasks]
    states_read(states, [StateKey(prefix, e.pk) for e in engines for prefix in ("engine", "unit")])
    refresh = {
        e.pk: e.pk in refresh_now or _needs_refresh(e, states.get(StateKey("engine", e.pk)) or {}) for e in engines
    }
    if not engines and not inflight.tasks:
        return []

    async def fetch_all(client):
        for e in engines:
            inflight.tasks[e.pk] = (e, asyncio.ensure_future(_fetch(client, e, refresh[e.pk], _static_kv(states, e))))
        await asyncio.wait([task for _, task in inflight.tasks.values()], timeout=wait_s)
        done = [(pk, engine, task) for pk, (engine, task) in inflight.tasks.items() if task.done()]
        for pk, _, _ in done:
            del inflight.tasks[pk]
        return [(engine, task.result()) for _, engine, task in done]

    return runner.run(fetch_all)


def states_read(states: States, keys):
    """Read into STATES the collector states of KEYS it does not hold yet (one query)."""
    missing = {str(key): key for key in keys if key not in states}
    if missing:
        found = dict(CollectorState.objects.filter(key__in=missing).values_list("key", "data"))
        states.update({key: found.get(name) or {} for name, key in missing.items()})


# Bodies larger than this are parsed on a worker thread, so the loop goes on serving the other
# engines' sockets meanwhile; smaller ones parse in well under a millisecond, less than the
# hand-off to a thread costs. Either way the parse is bounded (collectors/prom.Limits).
INLINE_PARSE_BYTES = 256 * 1024


async def _snapshot(coll, bodies):
    size = sum(len(b.content) for b in bodies.values() if isinstance(b, http.Response))
    return await asyncio.to_thread(coll.snapshot, bodies) if size > INLINE_PARSE_BYTES else coll.snapshot(bodies)


async def _fetch(client, engine, refresh=True, static_kv=None):
    coll = collector_for(engine.kind)
    bodies = await coll.fetch(client, engine.base_url, timeout=poll_timeout(engine), refresh=refresh)
    snap = await _snapshot(coll, bodies)
    if not refresh and snap.up and _static_stale(snap.kv, static_kv or {}):
        # The pool changed between two polls: the engine restarted faster than the probe saw,
        # so the window and models carried from before may be wrong too. Re-read them now.
        refresh = True
        bodies = await coll.fetch(client, engine.base_url, timeout=poll_timeout(engine), refresh=True)
        snap = await _snapshot(coll, bodies)
    snap.info["refreshed"] = refresh
    return Fetched(snap, time.time())


def _static_kv(states, engine):
    return ((states.get(StateKey("engine", engine.pk)) or {}).get("static") or {}).get("kv") or {}


def _static_stale(fresh_kv, static_kv):
    return any(value is not None and key in static_kv and static_kv[key] != value for key, value in fresh_kv.items())


def engine_account(state):
    """(when it was read, epoch s; the account) from an engine's collector STATE, or None."""
    static = (state or {}).get("static") or {}
    return (static["t"], static["account"]) if static.get("account") is not None and "t" in static else None


def _needs_refresh(engine, state):
    static = state.get("static") or {}
    return engine.status != "up" or time.time() - static.get("t", 0) >= STATIC_REFRESH_S


class PendingWrites:
    """The rows of one or several ticks (samples, collector states, engine and host rows, the
    rare KV-pool ledger rows), stored by `flush()` with one COPY, one upsert and two UPDATEs
    in one transaction. `urgent`: a status moved, an engine's or host's first reading, or a
    KV pool that changed: store it now."""

    def __init__(self, series: store.SeriesIds):
        self.batch = store.WriteBatch(series)
        self.engines: dict[int, Engine] = {}
        self.hosts: dict[int, Host] = {}
        self.kv_writes: list[Callable[[], None]] = []  # KV-pool ledger writes, in the order read
        self.urgent = False

    def __bool__(self):
        return bool(self.batch.samples or self.batch.states or self.engines or self.hosts or self.kv_writes)

    def add_host(self, host, collected: "HostCollected"):
        """Hold a host reading: its samples, its and its units' states, Host.latest."""
        self.batch.add_samples(ts=collected.at, host=host, values=collected.values)
        self.batch.put_states(
            {
                str(StateKey("host", host.pk)): collected.state,
                **{str(StateKey("unit", pk)): info for pk, info in collected.unit_infos.items()},
            }
        )
        if host.last_report_at is None:
            self.urgent = True  # its first report: the host is being watched, say so now
        # The clock offset measured at the last store stays in the reading until the next one.
        if isinstance(collected.reading, dict) and isinstance(host.latest, dict) and "clock_offset_s" in host.latest:
            collected.reading.setdefault("clock_offset_s", host.latest["clock_offset_s"])
        host.latest, host.last_report_at = collected.reading, collected.at
        self.hosts[host.pk] = host

    def add_engine(self, engine, fetched: Fetched, states: States) -> dict[str, Any]:
        """Derive ENGINE's reading from what was fetched and hold its rows; STATES gets its new
        collector state. A KV-pool ledger row is held like the rest, and stored at once (the
        launch observation links its change-log entry to it)."""
        now = datetime.fromtimestamp(fetched.at, tz=UTC)
        held = len(self.kv_writes)
        reading, new_state, values = _engine_reading(
            engine, fetched.snapshot, fetched.at, now, states, kv_writes=self.kv_writes
        )
        if len(self.kv_writes) > held:
            self.urgent = True
        key = StateKey("engine", engine.pk)
        states[key] = new_state
        self.batch.add_samples(ts=now, engine=engine, values=values)
        self.batch.put_states({str(key): new_state})
        first = engine.last_poll_at is None
        if _engine_apply(engine, reading, now) or first:  # a moved status, or a new engine's first reading
            self.urgent = True
        self.engines[engine.pk] = engine
        return reading

    def flush(self):
        self.batch.resolve()  # series that could not be looked up when read (an outage)
        if self.batch.samples:  # an engine removed meanwhile took its series along: keep the others' samples
            alive = set(
                Series.objects.filter(pk__in={row[0] for row in self.batch.samples}).values_list("pk", flat=True)
            )
            self.batch.samples = [row for row in self.batch.samples if row[0] in alive]
        # What is held goes back when the store fails (the database refused, or is gone): the
        # next store writes it (issue 31, item 4).
        samples, states = list(self.batch.samples), dict(self.batch.states)
        try:
            self._store()
        except BaseException:
            self.batch.samples, self.batch.states = samples, states
            raise
        self.engines, self.hosts, self.kv_writes, self.urgent = {}, {}, [], False

    def _store(self):
        with transaction.atomic(savepoint=False):
            self.batch.flush()
            for write in self.kv_writes:
                write()
            if self.engines:
                Engine.objects.bulk_update(list(self.engines.values()), ENGINE_FIELDS)
            if self.hosts:
                # The report's time is the database's (Now()), not this worker's clock: others
                # judge it by the database's (collector-stale, /healthz, adoption). How far this
                # worker's clock is off goes into the reading (the clock_skew rule, /healthz).
                offset = clock.offset_s()
            for host in self.hosts.values():
                if isinstance(host.latest, dict):
                    host.latest["clock_offset_s"] = offset
                Host.objects.filter(pk=host.pk).update(latest=host.latest, last_report_at=Now())

    def hold(self, newer: "PendingWrites", *, max_samples: int) -> int:
        """Take back what NEWER gathered after this one failed to store: the samples in the
        order they were read, the newest engine, host and collector state rows. At most
        MAX_SAMPLES samples are kept, the oldest dropped first; returns how many were dropped."""
        self.batch.samples.extend(newer.batch.samples)
        self.batch.states.update(newer.batch.states)
        self.engines.update(newer.engines)
        self.hosts.update(newer.hosts)
        self.kv_writes.extend(newer.kv_writes)
        self.urgent = self.urgent or newer.urgent
        self.batch.series = newer.batch.series
        return self.batch.drop_oldest(max_samples)


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


class EngineReading(NamedTuple):
    reading: dict[str, Any]  # one engine object as `poll --json` prints it
    state: dict  # the engine's new collector state
    values: dict  # {metric: number} for the sample store


def _engine_reading(engine, snapshot, fetched_at, now, states, *, kv_writes) -> EngineReading:
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
    return EngineReading(reading, new_state, values)


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


@dataclass
class Liveness:
    """One probe's finding about one engine. `changed`: Engine.status moved with it.
    `unit_now`: its unit read with the finding (an engine expected up found not up, or back up)."""

    engine: Engine
    status: str  # up | loading | down
    reason: str
    rechecked: bool
    checked_at: datetime
    changed: bool = False
    unit_now: unitnow.UnitNow | None = None

    @property
    def up(self):
        return self.status == "up"

    def as_dict(self):
        return {
            "engine": self.engine.name,
            "status": self.status,
            "up": self.up,
            "reason": self.reason,
            "rechecked": self.rechecked,
        }


def engines_probe(*, engines, keep_down=frozenset()) -> list[Liveness]:
    """Cheap liveness probe of every engine; a failed probe is re-checked ~0.3 s later.
    A status that moved is stored at once, except an "up" for an engine in KEEP_DOWN (ids of
    engines a metrics poll found down: a healthy /health does not overrule their /metrics).
    An engine expected up that is found not up, or up again, has its unit read with the finding
    (`collectors/unitnow`): the engine_down rule says from it why it died or who restarted it."""
    engines = list(engines)
    if not engines:
        return []

    async def probe_all(client):
        return await asyncio.gather(*(_probe_twice(client, e) for e in engines))

    findings = [
        finding if finding.up and finding.engine.pk in keep_down else liveness_record(finding)
        for finding in runner.run(probe_all)
    ]
    for finding in findings:
        if finding.engine.expected_up and (not finding.up or finding.changed):
            finding.unit_now = unitnow.unit_now(finding.engine)
    return findings


async def _probe_once(client, engine):
    coll = collector_for(engine.kind)
    try:
        resp = await http.aget(
            client,
            engine.base_url + coll.liveness_path,
            timeout=probe_timeout(),
            ok_statuses=coll.probe_ok_statuses,
            max_bytes=256 * 1024,
        )
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
    return Liveness(engine, status, reason, rechecked, timezone.now())


def liveness_record(finding: Liveness) -> Liveness:
    """Move Engine.status when FINDING changes it (a conditional UPDATE) and say so in `changed`."""
    engine = finding.engine
    finding.changed = engine.status != finding.status
    if finding.changed:
        with transaction.atomic():
            Engine.objects.filter(pk=engine.pk).update(
                status=finding.status, status_reason=finding.reason, status_changed_at=finding.checked_at
            )
        engine.status, engine.status_reason, engine.status_changed_at = (
            finding.status,
            finding.reason,
            finding.checked_at,
        )
    return finding


# --- hosts ---------------------------------------------------------------------------


class HostCollected(NamedTuple):
    at: datetime
    reading: dict  # host, gpus, processes, units… as `poll --json` prints them
    values: dict  # sample values
    unit_infos: dict  # engine id -> {"unit", "fatal_lines", "boot"}
    state: dict  # the host's new collector state


def host_collect(*, host, engines, state) -> HostCollected:
    """Read HOST's sources (no database): ENGINES' units and journals, STATE as the last poll left it."""
    now = timezone.now()
    return HostCollected(now, *host_read(engines=engines, state=state, now=now.timestamp()))
