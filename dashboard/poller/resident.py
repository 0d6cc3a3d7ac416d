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
  held in one transaction (`pending.PendingWrites`), then re-read the engine list and roles
  every ROLES_REFRESH_S. Between, a steady tick reads nothing from the database but the open
  alert events: the collector states, the series ids, the alert memory and the roles stay here;
- every liveness interval, `probe_tick`: probe the owned engines (one cheap request each),
  then evaluate and publish what the probes found;
- every poll interval, half an interval after the metrics, `launch_tick`: follow the unit
  states and compiler scans the metrics ticks read (engine starts), and when due observe how
  the engines were launched (`dashboard/launch/observer.py`: `systemctl show`/`cat`, a /proc scan,
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
from typing import Any, NamedTuple

from django.conf import settings
from django.db import close_old_connections, connection

from dashboard.alerts.evaluate import Memory, evaluate_host, evaluate_liveness, evaluate_polled
from dashboard.collectors import runner
from dashboard.collectors.derive import EngineReading
from dashboard.launch.observer import Observer
from dashboard.live.publish import LivePublisher
from dashboard.models import Engine, Host
from dashboard.poller import fetch, fleet, liveness
from dashboard.poller.exits import ExitPath
from dashboard.poller.fetch import StateKey
from dashboard.poller.pending import PendingWrites
from dashboard.samples import store
from dashboard.schedule import resident_duties

log = logging.getLogger(__name__)
PROBE_LAG_S = 0.02  # the probe clock runs this far behind the metrics clock
METRICS_WAIT_S = 0.3  # a probe waits at most this long for a metrics tick in progress
ROLES_REFRESH_S = 10.0  # the engine list, who leads and who is orphaned may be this stale
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

    def __init__(
        self, host_name, *, poll_interval=None, liveness_interval=None, duties=None, lease=None, flush_interval=None
    ):

        self.host_name = host_name
        self.poll_interval = poll_interval or settings.SPARKOPS_POLL_INTERVAL
        self.liveness_interval = liveness_interval or settings.SPARKOPS_LIVENESS_INTERVAL
        self.flush_interval = settings.SPARKOPS_FLUSH_INTERVAL if flush_interval is None else flush_interval
        self.duties = resident_duties() if duties is None else duties  # name -> (interval, fn): leader only
        self.host: Host | None = None  # read at the first tick, again after a failed one
        self.engines: list[Engine] = []
        self.leader = False
        self.alerts, self.live = Memory(), LivePublisher()
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

    def start(self):
        """Three threads: the probes, the metrics with the leader's upkeep, and the launch
        observation, so a slow host source or a hung engine's metrics never delays the other
        engines' liveness probes, and a slow `systemctl` never delays a poll."""
        start = time.monotonic()
        metrics = {
            "metrics": Clock(self.poll_interval, start),
            **{name: Clock(interval, start + interval) for name, (interval, _) in self.duties.items()},
        }
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
        for watcher in (self.exit_watch, self.stops, self.journal):
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
        if self.lease is not None:
            self.lease.release()

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
                    self.forget()  # whoever holds the box meanwhile moves its cursors on
                return
            if duty == "metrics":
                self.metrics_tick()
            elif duty == "probe":
                self.probe_tick()
            elif duty == "launch":
                self.launch_tick()
            elif self.leader:
                self.duties[duty][1]()
            else:
                return
            self.cycles[duty] += 1
        except Exception:
            self.cycles["failed"] += 1
            if duty == "metrics":
                # Re-read it all (the host may have been deleted and recreated), but keep the
                # readings held for the next store: they were read, and a failed tick loses none.
                self.forget(keep_held=True)
                self.host = None
            log.exception("resident poller (%s): %s failed; the next tick proceeds", self.host_name, duty)
            try:
                connection.close()  # a broken connection must not fail every later cycle
            except Exception:
                log.exception("resident poller (%s): closing the database connection failed", self.host_name)
        finally:
            close_old_connections()  # honours CONN_MAX_AGE and drops connections left unusable

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

    def _hold(self, older, newer):
        dropped = older.hold(newer, max_samples=settings.SPARKOPS_FLUSH_HOLD_MAX)
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
        """`flush()`; whether it stored. A failure is logged, and what was read stays held."""
        try:
            self.flush()
        except Exception as exc:
            log.warning(
                "resident poller (%s): storing the readings failed (%s); %d samples held for the next store",
                self.host_name,
                str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                len(self.pending.batch.samples),
            )
            return False
        return True

    def _read_roles_if_due(self) -> Host:
        """This poller's Host (read when not known), after the engine list and roles when due."""
        if self.host is None:
            self.host, _ = Host.objects.get_or_create(name=self.host_name)
        host = self.host
        if self.roles_at is None or time.monotonic() - self.roles_at >= ROLES_REFRESH_S:
            # The fresh rows must not be older than the ones held here: store first. When the
            # store fails, keep the roles and engines read before (their rows in the database
            # are older than these) and poll on, holding the readings; try again next refresh.
            if not self._flush_or_hold() and self.roles_at is not None:
                self.roles_at = time.monotonic()
                return host
            self.engines, self.leader = fleet.fleet_roles(host=host, hosts=fleet.fleet_hosts())
            self.roles_at = time.monotonic()
        return host

    def metrics_tick(self, engines=None) -> TickResult:
        """One poll, top to bottom: collect → hold (store when due) → evaluate alerts → publish
        live. ENGINES: poll these rather than the owned engines that are due (`poll --once`)."""
        host = self._read_roles_if_due()
        due = fleet.engines_due(self.engines) if engines is None else list(engines)
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
            self.pending.add_host(host, collected)
            polled = [(engine, self.pending.add_engine(engine, answer, self.states)) for engine, answer in answers]
            failing = self.launch.failing if self.launch is not None else {}
            for (engine, reading), (_, answer) in zip(polled, answers):
                reading["audit_failing"] = failing.get(engine.pk, 0)  # as the last observation's audit found
                if reading.get("up"):
                    self.answered[engine.pk] = answer.at  # when the answer came
                if reading.get("status") == "down":
                    self.down_by_metrics.add(engine.pk)
                else:
                    self.down_by_metrics.discard(engine.pk)
        finally:
            self._metrics_idle.set()
        self._guard("exit watch", self._rearm, own, collected.reading.get("units") or {}, polled)
        if self.pending.urgent or time.monotonic() - self.flushed_at >= self.flush_interval - self.poll_interval / 2:
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
        engines, now = self.engines, time.time()  # the metrics thread may swap the list meanwhile
        # Those whose metrics poll answered lately, with the time of that poll.
        answered = {
            e.pk: e.last_poll_at
            for e in engines
            if e.last_poll_at is not None and now - self.answered.get(e.pk, float("-inf")) < self.liveness_interval / 2
        }
        probed = liveness.engines_probe(
            engines=[e for e in engines if e.pk not in answered], keep_down=self.down_by_metrics
        )
        findings = [f for f in probed if not (f.up and f.engine.pk in self.down_by_metrics)]
        findings += [
            liveness.liveness_record(liveness.Liveness(e, "up", "", False, answered[e.pk]))
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
