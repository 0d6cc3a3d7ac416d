"""What one poll reads from the engines and the host, and the collector states it reads them with.

The resident poller (`resident.py`) calls these in order each tick: `host_collect` and
`engines_fetch` read (no transaction open while engines answer), then
`pending.PendingWrites.add_host` / `add_engine` derive the readings (`reading.py`) and hold
their rows, and `PendingWrites.flush` stores what is held in one transaction. Every engine of
a tick is fetched concurrently with a timeout below the interval, so a hung engine costs its
own poll, never the others'. The liveness probes are `liveness.engines_probe`."""

import asyncio
import time
from datetime import datetime
from typing import NamedTuple

from django.conf import settings
from django.utils import timezone

from dashboard import http
from dashboard.models import CollectorState, Engine
from sparkops.collectors import collector_for, runner
from sparkops.collectors.base import Snapshot
from sparkops.collectors.hostread import host_read


def poll_timeout(engine=None):
    """Below the interval, so a poll is over before the next one is due."""
    interval = (
        engine.poll_interval_s if engine and engine.poll_interval_s else None
    ) or settings.SPARKOPS_POLL_INTERVAL
    return max(0.2, min(interval * 0.75, 5.0))


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
    # A slow endpoint the last refresh could not read for a reason a retry may mend (a timeout, a
    # refused connection) is read again at the next poll, not a minute later: the window and models
    # it carries are missing until then. A bad body (a JSON bomb) waits its minute.
    return engine.status != "up" or bool(static.get("retry")) or time.time() - static.get("t", 0) >= STATIC_REFRESH_S


# --- hosts ---------------------------------------------------------------------------


class HostCollected(NamedTuple):
    at: datetime
    reading: dict  # host, gpus, processes, units… as `poll --json` prints them
    values: dict  # sample values
    unit_infos: dict  # engine id -> {"unit", "fatal_lines", "boot"}
    state: dict  # the host's new collector state


def host_collect(*, engines, state) -> HostCollected:
    """Read HOST's sources (no database): ENGINES' units and journals, STATE as the last poll left it."""
    now = timezone.now()
    return HostCollected(now, *host_read(engines=engines, state=state, now=now.timestamp()))
