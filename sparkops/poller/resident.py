"""The resident poller: the per-second work of a box's worker, without a Celery task per poll.

Liveness probes every second and metrics every 2 s are nearly all SparkOps does, and a Celery
task per poll would pay a beat tick, a broker round trip and a database reconnect each time.
So three threads in each `sparkops worker` (the probes; the metrics and the leader's upkeep;
the launch observation) each keep their database connection (the first two an event loop and
HTTP pools too), and run on the clock:

- every poll interval, `metrics_tick`: read this host's sources (PSI, GPU, systemd, journal,
  processes) and the metrics of the owned engines that are due (each at its own interval),
  hold their rows, store what is held when due, evaluate the alert rules, publish to the
  live view — in that order, in that one function;
- every SPARKOPS_FLUSH_INTERVAL (or at once when an engine's status moved): store what is
  held in one transaction (`pending.PendingWrites`); every ROLES_REFRESH_S, re-read the engine
  list and roles (what is held of an engine carried onto its fresh row). Between, a steady tick
  reads nothing from the database but the open alert events: the collector states, the series
  ids, the alert memory and the roles stay here;
- every liveness interval, `probe_tick`: probe the owned engines (one cheap request each),
  then evaluate and publish what the probes found;
- every poll interval, half an interval after the metrics, `launch_tick`: follow the unit
  states and compiler scans the metrics ticks read (engine starts), and when due observe how
  the engines were launched (`sparkops/launch/observer.py`: `systemctl show`/`cat`, a /proc scan,
  the audit, the change log), with the engines' accounts as their collectors last read them.
  It has a thread of its own so a slow `systemctl` never delays a poll.
- at once, when a watched engine's process exits (`exitwatch.py`: a pidfd for each unit's
  main process and its engine-core children, and the units' journal followed), `exit_seen`
  (`exits.py`): the same finding a failed probe makes, evaluated under the probe's lock, so a
  death is one alert whichever saw it first; the probe stays the backstop and sees hangs.

Ownership: a worker owns the engines of its own host, and the live worker whose host name
sorts first adopts the engines of hosts with no live worker and runs the fleet's upkeep
(`fleet.py`). One poller per box: a second worker started for the same host polls nothing
while the box's lease in Redis is held (`lease.PollerLease`). How a poller is run: `entrypoints.py`.

A tick that comes due while the previous one still runs is skipped, never queued: a stale
poll is worth less than none. No exception in a duty ends a thread (it is logged, the next
tick proceeds); a thread that ends anyway stops the worker process, so its supervisor sees it."""

import logging
import os
import threading
import time
from collections import deque
from datetime import UTC, datetime
from typing import Any, NamedTuple

from django.conf import settings
from django.db import close_old_connections, connection

from dashboard.dbgate import GATE
from dashboard.models import Engine, Host
from dashboard.samples import store
from dashboard.schedule import resident_duties
from sparkops.alerts.evaluate import evaluate_host, evaluate_liveness, evaluate_polled
from sparkops.alerts.held import HeldMemory
from sparkops.alerts.spool import Spool, spool_dir
from sparkops.collectors import runner
from sparkops.collectors.derive import EngineReading
from sparkops.launch.observer import Observer
from sparkops.live.publish import LivePublisher
from sparkops.poller import fetch, fleet, liveness
from sparkops.poller.exits import ExitPath
from sparkops.poller.fetch import StateKey
from sparkops.poller.pending import PendingWrites
from sparkops.poller.reading import ENGINE_FIELDS

log = logging.getLogger(__name__)
PROBE_LAG_S = 0.02  # the probe clock runs this far behind the metrics clock
METRICS_WAIT_S = 0.3  # a probe waits at most this long for a metrics tick in progress
# The engine list, who leads and who is orphaned may be this stale. With the orphan cutoff
# (fleet.py: 5 poll intervals and a store interval, 20 s) and the upkeep's 5 s, a dead leader's
# upkeep resumes elsewhere within 30 s (tests/fleet/test_netns_fleet.py).
ROLES_REFRESH_S = 5.0
# A metrics tick waits this share of the interval for its engines; an engine that has not
# answered by then (it has its own, longer poll timeout) is read at a later tick.
FETCH_WAIT = 0.4
LAUNCH_LAG = 0.5  # the launch duty runs this share of a poll interval after the metrics tick
LAUNCH_BACKLOG = 64  # metrics ticks' readings the launch duty may be behind (the oldest go first)


class Clock:
    """Next due time of one periodic duty; a missed tick is skipped, not made up."""

    def __init__(self, interval, start):
        self.interval, self.next = interval, start

    def due(self, now):
        return now >= self.next

    def advance(self, now):
        self.next += self.interval
        if self.next <= now:  # the duty overran one or more ticks: skip them
            self.next = now + self.interval


class TickResult(NamedTuple):
    """What one metrics tick read: the host's reading and each polled engine's."""

    host: dict[str, Any]
    engines: list[tuple[Engine, EngineReading]]


class LaunchInput(NamedTuple):
    """What the launch duty takes from one metrics tick: the box's own engines, their units'
    `systemctl show` and the compiler scan of the host's reading, and each engine's account as
    its collector last read it ({pk: (when, epoch s; account)})."""

    host: Host
    engines: list[Engine]
    units: dict[str, Any]
    processes: dict[str, Any]
    accounts: dict[int, tuple[float, dict]]


class ResidentPoller(ExitPath):
    """Two daemon threads polling HOST's sources and owned engines until `stop()`.

    Everything a tick needs between ticks is held here: the engine list and fleet roles
    (re-read every ROLES_REFRESH_S, shared with the probes, so a steady probe costs its HTTP
    requests and no query), the collector states, the series ids, the rows not yet stored,
    the alert evaluations' memory and the live publisher. `stop()` stores what is still held.
    `poll --once` builds one for itself and runs one tick (`poll_once`)."""

    pending: PendingWrites  # the rows read and not stored yet: made by forget()
    alerts: HeldMemory  # the alert memory, with the spool it pages from while the database is away

    def __init__(
        self,
        host_name,
        *,
        poll_interval=None,
        liveness_interval=None,
        duties=None,
        lease=None,
        flush_interval=None,
        adoptions=None,
        upkeep=None,
    ):

        self.host_name = host_name
        self.poll_interval = poll_interval or settings.SPARKOPS_POLL_INTERVAL
        self.liveness_interval = liveness_interval or settings.SPARKOPS_LIVENESS_INTERVAL
        self.flush_interval = settings.SPARKOPS_FLUSH_INTERVAL if flush_interval is None else flush_interval
        self.host: Host | None = None  # read at the first tick, again after a failed one
        self.engines: list[Engine] = []
        self.leader = False
        self.unreachable: dict[int, Any] = {}  # host pk -> last report: adopted boxes whose worker stopped
        self.orphans: dict[str, int] = {}  # host name -> pk: hosts with no live worker, when leading
        # lease.Adoptions: the orphans polled here, each under its box's lease (None: all of them,
        # as `poll --once` and the tests); lease.UpkeepLease: the upkeep runs once (None: here).
        self.adoptions, self.upkeep = adoptions, upkeep
        self.upkeep_clocks: dict[str, Clock] = {}  # the upkeep duties' clocks (the metrics thread's), once started
        # The alert memory pages from a spool of its own while the database is away (alerts/held.py).
        self.alerts, self.live = HeldMemory(spool=Spool(spool_dir(host_name))), LivePublisher()
        # name -> (interval, fn): leader only. The collector-stale check shares this alert memory.
        self.duties = resident_duties(memory=self.alerts, viewers=self.live.viewers) if duties is None else duties
        self.held_since: float | None = None  # epoch s: the first store that failed, while one has
        self.dropped = 0  # samples dropped unstored since the worker started (SPARKOPS_FLUSH_HOLD_MAX)
        self.launch = None  # the launch-configuration Observer, made at the first launch tick
        self.launch_inputs: deque[LaunchInput] = deque(maxlen=LAUNCH_BACKLOG)  # metrics → launch thread
        self.accounts_wanted: set[int] = set()  # launch → metrics thread: read these accounts again now
        self.forget()
        self.answered = {}  # engine pk -> when (epoch s) its last metrics poll that answered fetched it
        # Engines whose last metrics poll found them down: a probe that finds /health answering
        # does not move them up (their /metrics may be garbage behind a healthy /health); the
        # next metrics poll that reads them whole does.
        self.down_by_metrics = set()
        self.lease = lease  # a PollerLease, or None: poll unconditionally (tests, `poll --once`)
        self.cycles = {"metrics": 0, "probe": 0, "launch": 0, "failed": 0, **{name: 0 for name in self.duties}}
        self._metrics_idle = threading.Event()  # clear while a metrics tick runs
        self._metrics_idle.set()
        self._metrics_started = float("-inf")
        self._stop = threading.Event()
        self._threads = []
        self.exit_watch, self.journal = None, None  # exitwatch.py's watchers: started by start()
        self.stops = None  # stopsocket.StopListener, the units' stop hooks: started by start()
        self._liveness_lock = threading.Lock()  # one finding evaluated at a time: probe or exit
        self.exited_at: dict[int, Any] = {}  # engine pk -> when exit_seen found it down
        self.units_seen: dict[int, dict] = {}  # engine pk -> its unit as the last metrics tick read it
        self.deaths_seen: dict[int, tuple[str, float]] = {}  # engine pk -> (event source, when) of its last death
        self.exiting: dict[int, int] = {}  # engine pk -> exit paths reading its settling unit (exits.py)
        self.port_owners: dict[int, tuple[int, float]] = {}  # engine pk -> its port's owner (no unit; exits.py)
        self.unit_jobs: dict[str, Any] = {}  # scope -> unitjobs.JobWatch, started when a unit of it is watched

    def start(self):
        """Three threads: the probes, the metrics with the leader's upkeep, and the launch
        observation, so a slow host source or a hung engine's metrics never delays the other
        engines' liveness probes, and a slow `systemctl` never delays a poll."""
        start = time.monotonic()
        self.upkeep_clocks = {name: Clock(interval, start + interval) for name, (interval, _) in self.duties.items()}
        metrics = {"metrics": Clock(self.poll_interval, start), **self.upkeep_clocks}
        # A hair after the metrics tick, so a probe at the same tick sees that tick start.
        probes = {"probe": Clock(self.liveness_interval, start + PROBE_LAG_S)}
        launch = {"launch": Clock(self.poll_interval, start + self.poll_interval * LAUNCH_LAG)}
        for name, clocks in (("metrics", metrics), ("probes", probes), ("launch", launch)):
            thread = threading.Thread(
                target=self._run, args=(clocks,), name=f"sparkops-{name}-{self.host_name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        self._start_exit_watch()
        return self

    def stop(self, timeout=10.0):
        self._stop.set()
        for watcher in (self.exit_watch, self.stops, self.journal, *self.unit_jobs.values()):
            if watcher is not None:
                watcher.stop()
        for thread in self._threads:
            thread.join(timeout)
        if self.pending:
            try:  # what the last ticks read since the last flush
                self.flush()
            except Exception:
                log.exception("resident poller (%s): the last readings were not stored", self.host_name)
            finally:
                connection.close()
        for lease in (self.lease, self.adoptions, self.upkeep):
            if lease is not None:
                lease.release()

    def alive(self):
        return bool(self._threads) and all(t.is_alive() for t in self._threads)

    def _run(self, clocks):
        try:
            while not self._stop.is_set():
                for duty, clock in clocks.items():
                    if clock.due(time.monotonic()) and not self._stop.is_set():
                        self.run_duty(duty)
                        clock.advance(time.monotonic())
                self._stop.wait(max(0.0, min(c.next for c in clocks.values()) - time.monotonic()))
        except BaseException:  # run_duty catches every Exception: this is a bug or the interpreter ending
            if not self._stop.is_set():
                log.critical(
                    "resident poller (%s): thread %s died; stopping the worker so its supervisor sees it",
                    self.host_name,
                    threading.current_thread().name,
                    exc_info=True,
                )
                os._exit(70)  # a watcher that silently stopped watching is the failure this tool exists for
            raise
        finally:
            runner.close()
            connection.close()

    def run_duty(self, duty):
        """Run one duty now; an exception is logged and counted, never raised."""
        try:
            if self.lease is not None and not self.lease.holds():
                if duty != "launch":  # the launch duty keeps nothing the holder moves on
                    # Whoever holds the box meanwhile moves its cursors on; what this worker read
                    # before (cut off from the centre, say) is still real: stored once it is back.
                    self.forget(keep_held=True)
                return
            if duty == "metrics":
                self.metrics_tick()
            elif duty == "probe":
                self.probe_tick()
            elif duty == "launch":
                self.launch_tick()
            elif self.leader:
                if GATE.away() or self.held_since is not None:
                    # The fleet's upkeep (the outbox sweep, the collector-stale check) waits for the
                    # database and for this box's held report: a box that could not report is not dead.
                    return
                if self.upkeep is not None and not self.upkeep.holds():
                    return  # the last leader's lease stands until it expires or is given up
                self.duties[duty][1]()
                if self.upkeep is not None:
                    self.upkeep.ran(duty)
            else:
                if self.upkeep is not None:
                    self.upkeep.forfeit()
                return
            self.cycles[duty] += 1
        except Exception as exc:
            self.cycles["failed"] += 1
            if GATE.failed(exc):
                # The database is away: keep the host, the roles and the collector states read
                # before (they cannot be read again now), and poll on; the store writes it all later.
                log.warning(
                    "resident poller (%s): %s: %s; polling on, holding what is read", self.host_name, duty, GATE.why
                )
                self._close_quietly()
                return
            if duty == "metrics":
                # Re-read it all (the host may have been deleted and recreated), but keep the
                # readings held for the next store: they were read, and a failed tick loses none.
                self.forget(keep_held=True)
                self.host = None
            log.exception("resident poller (%s): %s failed; the next tick proceeds", self.host_name, duty)
            self._close_quietly()
        finally:
            close_old_connections()  # honours CONN_MAX_AGE and drops connections left unusable

    def _close_quietly(self):
        try:
            connection.close()  # a broken connection must not fail every later cycle
        except Exception:
            log.exception("resident poller (%s): closing the database connection failed", self.host_name)

    def forget(self, keep_held=False):
        """Drop what is kept between ticks: read it all again. The series ids go too: a
        rolled-back store may have taken new series with it. What was not stored yet goes
        too, unless KEEP_HELD (a failed tick: the readings are real, the next store writes
        them; a sample whose series is gone by then is left out by the store)."""
        self.states: fetch.States = {}
        self.roles_at = None  # when the engine list and roles were read
        held = self.pending if keep_held and getattr(self, "pending", None) else None
        self.pending = PendingWrites(store.SeriesIds())
        if held is not None:
            self.pending = self._hold(held, self.pending)
        self.inflight = fetch.InFlight()  # fetches a tick left running (on the metrics thread's loop)
        self.flushed_at = float("-inf")  # the first tick is stored at once

    def flush(self):
        """Store the readings gathered since the last flush (one transaction). When the store
        fails (the database refused, or is gone), what it held is held again, before anything
        read since, for the next flush; bounded by SPARKOPS_FLUSH_HOLD_MAX samples, the oldest
        dropped first (said in the log); the error is raised."""
        pending, self.pending = self.pending, PendingWrites(self.pending.batch.series)
        self.flushed_at = time.monotonic()
        if pending:
            try:
                pending.flush()
            except BaseException:
                self.pending = self._hold(pending, self.pending)
                raise
            if pending.refused:
                self._refused(pending.refused)

    def _fences(self, host) -> dict[int, int | None]:
        """{host pk: the fencing token of the lease it is polled under} (`lease.py`): this box's,
        and each adopted box's. None of it without leases (`poll --once`, the tests)."""
        fences: dict[int, int | None] = {}
        if self.lease is not None and host is not None:
            fences[host.pk] = self.lease.fence
        if self.adoptions is not None:
            fences.update({self.orphans[n]: f for n, f in self.adoptions.fences.items() if n in self.orphans})
        return fences

    def _refused(self, hosts: set[int]) -> None:
        """The store refused these hosts' rows: another poller took the box and stored since.
        Said once per store; this box's own lease asks for a new token, which it gets only if it
        still holds the box (Redis restarted and counts from 1 again)."""
        log.warning("resident poller (%s): stale fencing token, rows of hosts %s not stored", self.host_name, hosts)
        own = self.host.pk if self.host is not None else None
        if self.lease is not None and own in hosts:
            stored = Host.objects.filter(pk=own).values_list("fence", flat=True).first() or 0
            self.lease.refence(stored)

    def _hold(self, older, newer):
        dropped = older.hold(newer, max_samples=settings.SPARKOPS_FLUSH_HOLD_MAX)
        self.dropped += dropped
        if dropped:
            log.warning(
                "resident poller (%s): %d oldest samples dropped unstored: the database has refused "
                "the stores for a while and at most SPARKOPS_FLUSH_HOLD_MAX=%d are held",
                self.host_name,
                dropped,
                settings.SPARKOPS_FLUSH_HOLD_MAX,
            )
        return older

    def _flush_or_hold(self):
        """`flush()`; whether it stored. A failure is logged, and what was read stays held. While
        the database is away (`dbgate`) nothing is tried: the readings are held without a wait.
        The first store after an outage writes what was held, then the alerts the spool holds."""
        if GATE.away(max_age=0.0):  # checked now: a server stopped a moment ago costs no pool wait
            self.held_since = self.held_since or time.time()
            return False
        stored = bool(self.pending)
        try:
            self.flush()
        except Exception as exc:
            GATE.failed(exc)
            self.held_since = self.held_since or time.time()
            log.warning(
                "resident poller (%s): storing the readings failed (%s); %d samples held for the next store",
                self.host_name,
                str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                len(self.pending.batch.samples),
            )
            return False
        if stored:
            GATE.reachable()
            if self.held_since is not None:
                log.warning(
                    "resident poller (%s): the readings held for %.0f s are stored (%d dropped at the bound)",
                    self.host_name,
                    time.time() - self.held_since,
                    self.dropped,
                )
                self.held_since = None
            self._guard("alerts held in the spool", self.alerts.catch_up)
        return True

    def _read_roles_if_due(self) -> Host:
        """This poller's Host (read when not known), after the engine list and roles when due."""
        if self.host is None:
            self.host, _ = Host.objects.get_or_create(name=self.host_name)
        host = self.host
        if self.roles_at is None or time.monotonic() - self.roles_at >= ROLES_REFRESH_S:
            # While the database is away, keep the roles and engines read before and poll on,
            # holding the readings; try again next refresh.
            if self.roles_at is not None and GATE.away(max_age=0.0):
                self.roles_at = time.monotonic()
                return host
            roles = fleet.fleet_view(host=host, hosts=fleet.fleet_hosts())
            GATE.answered()  # the upkeep and the reads of this tick need not check again
            if roles.leader and not self.leader:  # it leads now: the upkeep runs at once, not a clock later
                for clock in self.upkeep_clocks.values():
                    clock.next = time.monotonic()
            self.engines, self.leader, self.unreachable = (
                self._with_held(roles.engines),
                roles.leader,
                roles.unreachable,
            )
            self.orphans = roles.orphans
            self.roles_at = time.monotonic()
        return host

    def _with_held(self, engines: list[Engine]) -> list[Engine]:
        """ENGINES as just read, each with what this poller holds of it and has not stored yet:
        the held fields (a poll's reading, status, times) are newer than the row, and the fresh
        object takes the held one's place, so the probes and the next store share one object per
        engine. The roles are read every ROLES_REFRESH_S without storing first: a store each
        time was half the stores, and the dearest part of a tick."""
        held = self.pending.engines
        previous = {e.pk: e for e in self.engines}
        for engine in engines:
            before = held.get(engine.pk)
            if before is not None:
                for field in ENGINE_FIELDS:
                    setattr(engine, field, getattr(before, field))
                held[engine.pk] = engine
            elif "latest" in engine.get_deferred_fields():
                # The roles' read defers `latest` (fleet.py); the rules of an engine with no unit read
                # it, and a load then would wait on the pool if the database went away meanwhile:
                # a death not paged. What this poller last knew of it stands until its next poll.
                old = previous.get(engine.pk)
                if old is not None and "latest" not in old.get_deferred_fields():
                    engine.latest = old.latest
        return engines

    def metrics_tick(self, engines=None) -> TickResult:
        """One poll, top to bottom: collect → hold (store when due) → evaluate alerts → publish
        live. ENGINES: poll these rather than the owned engines that are due (`poll --once`)."""
        host = self._read_roles_if_due()
        due = fleet.engines_due(self._polling()) if engines is None else list(engines)
        self.pending.fences.update(self._fences(host))
        own = [e for e in self.engines if e.host_id == host.pk]
        self._metrics_started = time.monotonic()
        self._metrics_idle.clear()
        try:
            # 1. Collect: the host's sources, then every due engine at once (no transaction open).
            host_key = StateKey("host", host.pk)
            fetch.states_read(self.states, [host_key])
            collected = fetch.host_collect(engines=own, state=self.states[host_key])
            self.states[host_key] = collected.state
            self.states.update({StateKey("unit", pk): info for pk, info in collected.unit_infos.items()})
            wanted, self.accounts_wanted = self.accounts_wanted, set()
            answers = fetch.engines_fetch(
                engines=due,
                states=self.states,
                inflight=self.inflight,
                wait_s=None if engines is not None else self.poll_interval * FETCH_WAIT,
                refresh_now=wanted,
            )
            # 2. Hold the rows; store them every flush interval, or now when a status moved.
            if self.held_since is not None or self.dropped:  # in the box's report: what is held, what was lost
                collected.reading["held"] = self.held_state()
            self.pending.add_host(host, collected)
            before = {e.pk: e.status_changed_at for e in due if e.status == "unknown"}
            polled = [(engine, self.pending.add_engine(engine, answer, self.states)) for engine, answer in answers]
            for engine, reading in polled:
                self._box_unknown(engine, reading, before)
            failing = self.launch.failing if self.launch is not None else {}
            applied = self.launch.applied if self.launch is not None else {}
            for (engine, reading), (_, answer) in zip(polled, answers):
                reading["audit_failing"] = failing.get(engine.pk, 0)  # as the last observation's audit found
                reading["audit_applied"] = applied.get(engine.pk, 0)  # fixes that wait for a restart
                if reading.get("up"):
                    self.answered[engine.pk] = answer.at  # when the answer came
                if reading.get("status") == "down":
                    self.down_by_metrics.add(engine.pk)
                else:
                    self.down_by_metrics.discard(engine.pk)
        finally:
            self._metrics_idle.set()
        self._guard("exit watch", self._rearm, own, collected.reading.get("units") or {}, polled)
        if (
            self.pending.urgent
            or self.held_since is not None  # an outage: store as soon as the database is back
            or time.monotonic() - self.flushed_at >= self.flush_interval - self.poll_interval / 2
        ):
            self._flush_or_hold()  # a failure holds the readings; the alerts and live view go on
        # 3. Alerts, then 4. the live view: each failure is logged, never costs the other.
        self._guard("alert rules", evaluate_host, host, collected.reading, memory=self.alerts, observed_at=collected.at)
        self._guard("alert rules", evaluate_polled, polled, memory=self.alerts)
        self._guard("live push", self.live.host_polled, host, collected.reading)
        self._guard("live push", self.live.engines_polled, polled)
        # 5. Hand the launch duty (its own thread) what it follows.
        accounts = {e.pk: fetch.engine_account(self.states.get(StateKey("engine", e.pk))) for e in own}
        self.launch_inputs.append(
            LaunchInput(
                host,
                own,
                collected.reading.get("units") or {},
                collected.reading.get("processes") or {},
                {pk: account for pk, account in accounts.items() if account is not None},
            )
        )
        return TickResult(collected.reading, polled)

    def _box_unknown(self, engine: Engine, reading: EngineReading, before: dict) -> None:
        """An adopted engine of an unreachable box that did not answer is "unknown", not "down"
        (`liveness.box_unknown`); BEFORE: {pk: status_changed_at} of those already unknown."""
        since = self.unreachable.get(engine.host_id)
        if since is None or reading.get("status") != "down":
            return
        text = f"{liveness.unreachable_text(engine.host.name, since)} (here: {reading.get('error') or 'no answer'})"
        reading["status"], reading["error"] = "unknown", text
        engine.status, engine.status_reason = "unknown", text
        if engine.pk in before:  # unknown already: its status did not move
            engine.status_changed_at = before[engine.pk]

    def _polling(self) -> list[Engine]:
        """The engines to poll now: this box's, and those of the orphans this worker holds the
        lease of (`lease.Adoptions`, asked every tick, so a box its own worker claims back is
        dropped at once: an engine is polled by one worker at a time)."""
        engines, host = self.engines, self.host
        if self.adoptions is None or host is None:
            return engines
        held = {self.orphans[name] for name in self.adoptions.settle(self.orphans) if name in self.orphans}
        return [e for e in engines if e.host_id == host.pk or e.host_id in held]

    def held_state(self) -> dict:
        """What this poller holds because the database is away: since when, how many samples,
        how many were dropped at SPARKOPS_FLUSH_HOLD_MAX, the alerts its spool holds."""
        return {
            "since": self.held_since,
            "samples": len(self.pending.batch.samples),
            "max_samples": settings.SPARKOPS_FLUSH_HOLD_MAX,
            "dropped": self.dropped,
            **self.alerts.held_state(),
        }

    def launch_tick(self):
        """The launch duty: follow the engines' starts through every metrics tick's readings
        since the last launch tick, then observe how the engines were launched when due
        (`launch/observer.Observer.tick`: a time check on most ticks; every 60 s, and at
        once when a unit or an engine's status moved, a read). The snapshots it made."""

        inputs = []
        while self.launch_inputs:
            inputs.append(self.launch_inputs.popleft())
        if not inputs:
            return []
        if self.launch is None:
            self.launch = Observer()
        for earlier in inputs[:-1]:
            self.launch.track(engines=earlier.engines, units=earlier.units, processes=earlier.processes)
        last = inputs[-1]
        made = self.launch.tick(
            engines=last.engines, units=last.units, processes=last.processes, host=last.host, accounts=last.accounts
        )
        self.accounts_wanted |= self.launch.accounts_to_read()
        return made

    def probe_tick(self):
        """Probe every owned engine, except those whose metrics poll answered within the last
        half liveness interval: a full /metrics answer is proof of life, so that probe would
        only repeat it (the metrics tick and every other probe tick coincide; a probe waits
        for a metrics tick that started less than METRICS_WAIT_S ago, never longer, then
        probes what it has not heard from). Their liveness is taken from the poll. A probe that
        finds up an engine the last metrics poll found down changes nothing (`down_by_metrics`)."""
        running_for = time.monotonic() - self._metrics_started
        if running_for < METRICS_WAIT_S:  # a tick that has just started: its answers are coming
            self._metrics_idle.wait(METRICS_WAIT_S - running_for)
        engines, now = self._polling(), time.time()  # the metrics thread may swap the list meanwhile
        # Those whose metrics poll answered lately, with the time of that poll.
        answered = {  # when the answer came, on this worker's clock (as its probes' are)
            e.pk: datetime.fromtimestamp(self.answered[e.pk], UTC)
            for e in engines
            if e.last_poll_at is not None and now - self.answered.get(e.pk, float("-inf")) < self.liveness_interval / 2
        }
        probed = liveness.engines_probe(
            engines=[e for e in engines if e.pk not in answered],
            keep_down=self.down_by_metrics,
            unreachable=self.unreachable,
            fences=self._fences(self.host),
        )
        findings = [f for f in probed if not (f.up and f.engine.pk in self.down_by_metrics)]
        findings += [
            liveness.liveness_record(
                liveness.Liveness(e, "up", "", False, answered[e.pk]), fence=self._fences(self.host).get(e.host_id)
            )
            for e in engines
            if e.pk in answered
        ]
        with self._liveness_lock:  # an exit seen meanwhile is evaluated before or after, never beside
            for finding in findings:
                if finding.engine.pk in self.exiting:
                    continue  # its exit path reads the settling unit and evaluates this death with it
                exited = self.exited_at.get(finding.engine.pk)
                if finding.up and exited is not None and finding.checked_at < exited:
                    continue  # answered just before its process exited: stale
                self._guard("alert rules", evaluate_liveness, finding, memory=self.alerts)
                self._guard("live push", self.live.liveness, finding)
        return findings

    def _guard(self, what, fn, *args, **kwargs):
        try:
            fn(*args, **kwargs)
        except Exception:
            log.exception("resident poller (%s): %s failed", self.host_name, what)
