"""The poller's side of a death seen at once (`ExitPath`, mixed into the ResidentPoller).

The exit watch (`exitwatch.py`: a pidfd for each watched unit's main process and its
engine-core children, and the units' journal followed) calls `exit_seen` from its own thread
when a watched process exits. It makes the same finding a failed probe makes, evaluated under
the probe's lock, so a death is one alert whichever saw it first (the unit, which may take up to
EXIT_SETTLE_S to settle, is read outside the lock); the probe stays the backstop and sees hangs.
Every metrics tick re-arms the watch with the MainPIDs it read (`_rearm`)."""

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import psutil
from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from dashboard import http
from dashboard.dbgate import GATE
from sparkops.alerts.evaluate import evaluate_liveness
from sparkops.alerts.models import Delivery
from sparkops.alerts.outbox import delivery_send
from sparkops.collectors import sockowner, unitnow
from sparkops.launch.starts import parse_timestamp
from sparkops.poller import exitwatch, liveness, stopsocket, unitjobs

if TYPE_CHECKING:
    from dashboard.models import Engine
    from sparkops.alerts.evaluate import Memory
    from sparkops.live.publish import LivePublisher
    from sparkops.poller.exitwatch import ExitWatcher, JournalFollower
    from sparkops.poller.lease import PollerLease
    from sparkops.poller.stopsocket import Stop, StopListener

log = logging.getLogger(__name__)
# After a main process exits, wait at most this long for its unit to say so. systemd reaps in tens
# of ms on a quiet box; at load 8 CI once saw it still "active" with the old MainPID after 0.5 s, and
# the page went out without systemd's cause. A page a second later with its cause beats one at once
# without it; the wait ends as soon as the unit has moved on.
EXIT_SETTLE_S = 2.0
EXIT_SEEN = "exit seen at once"  # the card's words for an engine whose process this worker watches
STOP_TOLD = "unit's stop told at once"  # ... for one whose unit's stop hook tells this worker's listener
# A death seen by one event source (a pidfd, the unit's stop hook) and then by the other this soon
# after, while the engine is still down, is the same death: the second adds nothing.
SAME_DEATH_S = 10.0
# A unit collected before it was read: its run's end message is waited for this long in the journal
# follower's copy (journald may lag behind the exit by this much at load 8).
JOURNAL_WAIT_S = 1.0
# ... or until the follower holds a line the process wrote this soon before its exit was seen: its
# last words, written after any stop job's "Stopping" (and after its fatal line).
LAST_WORDS_S = 0.25
PROPS_TRIES = 5  # a `systemctl show` that fails on the exit path is tried again this often
PORT_LOOK_S = 10.0  # an engine with no unit whose port has no owner yet is looked for again after this
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0", "::"}


def _on_this_box(engine) -> bool:
    """Whether ENGINE (with no unit) serves on this worker's own box: its host is this worker's
    and its URL names this box: a loopback or wildcard address, the box's name, or one of its
    own interfaces' addresses (in a fleet an engine is addressed by the box's LAN address, so the
    centre can reach it too; another address may be another box's)."""
    if engine.host.name != settings.SPARKOPS_HOST_NAME:
        return False
    where = urlsplit(engine.url).hostname or ""
    return where in LOCAL_HOSTS | {settings.SPARKOPS_HOST_NAME} or where in _own_addresses()


_addresses: list[tuple[float, frozenset[str]]] = [(float("-inf"), frozenset())]  # (monotonic s looked, them)


def _own_addresses() -> frozenset[str]:
    """This box's interface addresses (IPv4 and IPv6), read again at most every PORT_LOOK_S."""
    looked, known = _addresses[0]
    if time.monotonic() - looked < PORT_LOOK_S:
        return known
    try:
        found = frozenset(
            a.address.split("%", 1)[0]
            for addrs in psutil.net_if_addrs().values()
            for a in addrs
            if a.family in (socket.AF_INET, socket.AF_INET6)
        )
    except OSError:
        found = known
    _addresses[0] = (time.monotonic(), found)
    return found


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


class ExitPath:
    """The exit watch's start, re-arming and findings, for a ResidentPoller: it uses the
    poller's engines, lease, liveness lock, alert memory, live publisher and `_guard`, and
    fills its `exit_watch`, `journal` and `exited_at`."""

    # The ResidentPoller's, as this mixin uses them.
    host_name: str
    liveness_interval: float
    engines: list["Engine"]
    lease: "PollerLease | None"
    alerts: "Memory"
    live: "LivePublisher"
    exit_watch: "ExitWatcher | None"
    journal: "JournalFollower | None"
    stops: "StopListener | None"
    exited_at: dict[int, datetime]  # engine pk -> when exit_seen found it down
    units_seen: dict[int, dict]  # engine pk -> its unit as the last metrics tick read it
    deaths_seen: dict[int, tuple[str, float]]  # engine pk -> (event source, monotonic s) of its last death
    exiting: dict[int, int]  # engine pk -> exit paths reading its unit now (the probe leaves it to them)
    port_owners: dict[int, tuple[int, float]]  # engine pk -> (its port's owner pid, monotonic s looked) (no unit)
    unit_jobs: dict[str, "unitjobs.JobWatch"]  # scope -> the manager's job signals (unitjobs.py)
    _stop: threading.Event
    _liveness_lock: threading.Lock
    _guard: Callable[..., Any]  # _guard(what, fn, *args, **kwargs): fn's exception logged, not raised

    def _start_exit_watch(self):

        if not settings.SPARKOPS_EXIT_WATCH:
            return
        pidfds = settings.SPARKOPS_EXIT_WATCH_PIDFDS and exitwatch.pidfd_supported()
        if settings.SPARKOPS_EXIT_WATCH_PIDFDS and not pidfds:
            log.info(
                "resident poller (%s): no pidfds here; exits are seen by the stop hook and the probe", self.host_name
            )
        if pidfds:
            self.exit_watch = exitwatch.ExitWatcher(self.exit_seen, name=f"sparkops-exits-{self.host_name}").start()
        if settings.SPARKOPS_EXIT_WATCH_STOP_HOOK:
            try:
                self.stops = stopsocket.StopListener(
                    settings.SPARKOPS_STOP_SOCKET, self.stop_seen, name=f"sparkops-stops-{self.host_name}"
                ).start()
            except OSError as exc:
                log.warning(
                    "resident poller (%s): cannot listen for units' stop hooks on %s (%s); pidfds and the probe watch",
                    self.host_name,
                    settings.SPARKOPS_STOP_SOCKET,
                    exc,
                )
        if self.exit_watch is not None or self.stops is not None:
            self.journal = exitwatch.JournalFollower(name=f"sparkops-journal-{self.host_name}").start()
            # The first page's send would make the shared HTTP client (its TLS context: 200 ms here).
            self._guard("the HTTP client made ahead", http.sync_client)

    def _rearm(self, own, units, polled):
        """Point the exit watcher at the main processes this tick's `systemctl show` read and the
        journal follower at the units; say on each polled engine's reading how it is watched."""
        mains = {}
        self.units_seen = {e.pk: units[e.unit] for e in own if e.unit and units.get(e.unit)}
        if self.exit_watch is not None:
            mains = {e.pk: (units.get(e.unit) or {}).get("MainPID") or 0 for e in own if e.unit}
            mains.update({e.pk: self._port_owner(e) for e in own if not e.unit and _on_this_box(e)})
            self.exit_watch.watch(mains)
        if self.exit_watch is not None or self.stops is not None:
            for scope in {e.unit_scope or "system" for e in own if e.unit} - set(self.unit_jobs):
                self.unit_jobs[scope] = unitjobs.JobWatch(scope, name=f"sparkops-unitjobs-{scope}").start()
        if self.journal is not None:  # started with either event source
            self.journal.follow(
                [e.unit for e in own if e.unit and e.unit_scope != "user"],
                [e.unit for e in own if e.unit and e.unit_scope == "user"],
            )
        probe = f"probe every {self.liveness_interval:g} s"
        for engine, reading in polled:
            if mains.get(engine.pk):
                reading["watched"] = EXIT_SEEN
            elif self.stops is not None and (self.units_seen.get(engine.pk) or {}).get("StopHook"):
                reading["watched"] = STOP_TOLD  # the pidfds off or not armed: the unit's own stop still tells
            else:
                reading["watched"] = probe

    def _port_owner(self, engine) -> int:
        """The process that owns ENGINE's listening port (an engine with no unit, on this box): the
        one of the socket's holders whose parent is not one of them (a server's forked workers
        share its socket). Looked for again only when the one found is gone, at most every
        PORT_LOOK_S: a walk of /proc is too dear for every tick."""
        pid, looked = self.port_owners.get(engine.pk, (0, float("-inf")))
        if pid and os.path.exists(f"/proc/{pid}"):
            return pid
        if time.monotonic() - looked < PORT_LOOK_S:
            return 0
        port = urlsplit(engine.url).port
        holders = sockowner.port_owner_pids(port) if port else set()
        pid = min((p for p in holders if _parent(p) not in holders), default=0)
        self.port_owners[engine.pk] = (pid, time.monotonic())
        return pid

    def exit_seen(self, engine_pk, pid, what):
        """A watched process of engine ENGINE_PK exited (the exit watcher's thread): the finding a
        failed probe makes, now — Engine.status, the unit read as it settles, the alert rules
        (engine_down with its cause), the live card. The probe confirms later and stays the
        backstop; both evaluate under one lock, so the death is one alert."""

        engine = next((e for e in self.engines if e.pk == engine_pk), None)
        if engine is None or not self._ours(engine):
            return
        main = what == "main process"
        reason = f"its {what} (pid {pid}) exited" + ("" if main else " while the API server runs")

        def unit_read(engine):
            return self._unit_at_exit(engine, pid if main else None) if unitnow.is_local(engine) else None

        # An engine core's death is refined by its API server's: only the main process's ends the death.
        self._death_found(engine, reason, "pidfd" if main else "", unit_read)

    def stop_seen(self, stop: "Stop"):
        """A watched engine's unit stopped (the stop listener's thread; its ExecStopPost= hook said
        so): the same finding as `exit_seen`, with the unit as systemd's own verdict makes it
        (`stopsocket.unit_at_stop`) rather than read again. A stop by SIGTERM (`systemctl stop`
        or `restart`: a start may follow) is left to the probe, which asks systemd."""
        # %n is the full name; an engine may name its unit without ".service", as systemctl accepts.
        names = {stop.unit, stop.unit.removesuffix(".service")}
        engine = next((e for e in self.engines if e.unit in names and unitnow.is_local(e)), None)
        if engine is None or not self._ours(engine) or stop.by_hand:
            return
        last = self.units_seen.get(engine.pk)

        def unit_read(engine):
            run_start = unitnow._run_start(last) if (last or {}).get("MainPID") == stop.main_pid else None
            fatal, limit = (
                self.journal.cause(engine.unit, run_start=run_start) if self.journal is not None else ("", "")
            )
            # One journalctl in any case: the follower may not have the last lines yet, and the job
            # messages tell a stop someone asked for (an exit 0 on SIGTERM) from an exit of its own.
            read_fatal, read_limit, job = unitnow._journal_lines(engine, since=run_start)
            return unitnow.UnitNow(
                stopsocket.unit_at_stop(stop, last), fatal or read_fatal, limit or read_limit, job
            ).of(engine.unit)

        self._death_found(engine, stop.describe(), "stop hook", unit_read)

    def _ours(self, engine):
        """Whether ENGINE's death is this worker's to page now."""
        if not engine.expected_up or self._stop.is_set():
            return False
        return self.lease is None or self.lease.holds()

    def _death_found(self, engine, reason, source, unit_read):
        """The down finding for ENGINE, its unit from UNIT_READ(engine), evaluated and sent now;
        nothing when the other event source (SOURCE: "pidfd", "stop hook"; "" for a partial
        death) already reported this death.

        The unit is read outside the probe's lock (it may wait up to EXIT_SETTLE_S for systemd to
        settle): the other engines' probes and deaths go on meanwhile. The death is claimed first,
        under the lock: the other source then adds nothing, and the probe leaves this engine's
        finding to this path until it is evaluated (`exiting`), so the page carries the settled unit."""
        seen = time.monotonic()
        try:
            with self._liveness_lock:
                before = self.deaths_seen.get(engine.pk)
                if (
                    source
                    and before is not None
                    and before[0] != source
                    and seen - before[1] < SAME_DEATH_S
                    and engine.status == "down"
                ):
                    log.info(
                        "resident poller (%s): %s %s; the %s saw it first",
                        self.host_name,
                        engine.name,
                        reason,
                        before[0],
                    )
                    return
                finding = liveness.liveness_record(
                    liveness.Liveness(engine, "down", reason, True, timezone.now()),
                    fence=self.lease.fence if self.lease is not None else None,  # its own box's engine
                )
                self.exited_at[engine.pk] = finding.checked_at
                if source:
                    self.deaths_seen[engine.pk] = (source, time.monotonic())
                self.exiting[engine.pk] = self.exiting.get(engine.pk, 0) + 1
            recorded = time.monotonic()
            try:
                finding.unit_now = unit_read(engine)
                read = time.monotonic()
                with self._liveness_lock:
                    self._guard("alert rules", evaluate_liveness, finding, memory=self.alerts)
                    evaluated = time.monotonic()
                    self._guard("send now", self._send_now, engine)
                    self._guard("live push", self.live.liveness, finding)
            finally:
                with self._liveness_lock:
                    left = self.exiting.get(engine.pk, 1) - 1
                    if left > 0:
                        self.exiting[engine.pk] = left
                    else:
                        self.exiting.pop(engine.pk, None)
        finally:
            close_old_connections()
        log.info(
            "resident poller (%s): %s %s; status stored in %.0f ms, unit read in %.0f ms, rules in %.0f ms",
            self.host_name,
            engine.name,
            reason,
            (recorded - seen) * 1000,
            (read - recorded) * 1000,
            (evaluated - read) * 1000,
        )

    def _send_now(self, engine):
        """Send the pages the exit just raised from here, on a thread of their own, rather than
        after a broker round trip (the `alerts.deliver` task queued for them finds them claimed:
        `outbox.delivery_send` claims a row with a conditional UPDATE, so each is sent once)."""

        if GATE.away():
            return  # the database is away: the alert memory paged from its spool (alerts/held.py)
        ids = list(
            Delivery.objects.filter(
                event__engine=engine, event__rule="engine_down", transition="firing", status="pending"
            ).values_list("pk", flat=True)
        )

        def send():
            try:
                for pk in ids:
                    delivery_send(delivery_id=pk)
            except Exception:
                log.exception(
                    "resident poller (%s): sending a page at once failed; the outbox retries it", self.host_name
                )
            finally:
                connection.close()

        if ids:
            threading.Thread(target=send, name=f"sparkops-page-{engine.pk}", daemon=True).start()

    def _unit_at_exit(self, engine, pid):
        """ENGINE's unit (`unitnow.UnitNow`) once systemd has seen its main process PID exit (at
        most EXIT_SETTLE_S), with the dead process's cause lines and the job that ended it, if any.

        Only systemd tells a stop someone asked for from an exit 0 of the engine's own, and it
        tells it these ways, taken in this order: the jobs its manager announces on D-Bus
        (`unitjobs.JobWatch`: at once, when the worker can reach the manager); the journal
        follower's copy of its job messages; the job it runs on the unit while the process dies
        (`Job`); its timestamps (a stop job leaves the active state before its process exits, an
        exit of its own after: ActiveExitTimestamp < ExecMainExitTimestamp); then the follower
        waited on, at most JOURNAL_WAIT_S, until it holds the run's end or the process's last
        words (`JournalFollower.wait_for_end`: a unit left inactive is unloaded at once and
        `systemctl show` reads blank); journalctl only when nothing follows the unit or nothing
        told in time."""

        deadline, exited = time.monotonic() + EXIT_SETTLE_S, time.time()
        props, job_running = self._settled_props(engine, pid, deadline)
        # The fatal line of the process that died: logged since it started (the last tick's reading
        # of the unit, when that was this pid), whatever run systemd has started since.
        last = self.units_seen.get(engine.pk) or {}
        run_start = unitnow._run_start(last) if pid is not None and last.get("MainPID") == pid else None
        since = run_start if run_start is not None else unitnow._run_start(props)
        follower = self.journal if self.journal is not None and self.journal.following(engine.unit) else None
        job, decided, how = None, False, "journalctl"
        watch = self.unit_jobs.get(engine.unit_scope or "system")
        if watch is not None:
            try:
                asked = watch.job_at(engine.unit, exited)
            except unitjobs.Unknown as exc:
                log.info("resident poller (%s): %s: the manager's jobs unknown (%s)", self.host_name, engine.name, exc)
            else:
                decided, how = True, "the manager's job signals"
                seen_restarts = (self.units_seen.get(engine.pk) or {}).get("NRestarts")
                by_systemd = (props or {}).get("SubState") == "auto-restart" or (
                    seen_restarts is not None and ((props or {}).get("NRestarts") or 0) > seen_restarts
                )
                if asked is not None and not asked.type and by_systemd:
                    asked = None  # a job of no known type while systemd restarts it by itself: its own
                if asked is not None:
                    # A job whose type was not read yet: a restart if the unit runs again, else a stop.
                    running = (props or {}).get("ActiveState") in ("active", "activating")
                    op = (
                        ("stop" if asked.type == "stop" else "restart")
                        if asked.type
                        else ("restart" if running else "stop")
                    )
                    job = unitnow.Job(op, asked.queued_at, True, pending=op == "restart")
        if not decided and follower is not None and since is not None:
            job = unitnow.job_of(_since(follower.job_entries(engine.unit), since))
            decided, how = job is not None, "the journal follower's job messages"
        if not decided and job_running is not None:
            # The job systemd was running while the process died: a stop, or a restart once a new run is up.
            restarted = (props or {}).get("ActiveState") in ("active", "activating")
            job, decided = unitnow.Job("restart" if restarted else "stop", job_running, True, pending=restarted), True
            how = "the unit's job"
        if not decided:
            job, decided = _job_from_timestamps(props, pid)
            how = "the unit's timestamps"
        if not decided and follower is not None and since is not None:
            waited = time.monotonic()
            entries = follower.wait_for_end(
                engine.unit,
                since,
                max(deadline, time.monotonic() + JOURNAL_WAIT_S),
                spoke_after=exited - LAST_WORDS_S,
            )
            if entries is not None:
                job, decided = unitnow.job_of(_since(entries, since)), True
            how = f"the journal follower, waited {(time.monotonic() - waited) * 1000:.0f} ms"
        log.info(
            "resident poller (%s): %s exit judged by %s: %s",
            self.host_name,
            engine.name,
            how if decided else "journalctl (nothing else told)",
            job.text if job is not None else "no job: the process's own exit",
        )
        if follower is not None and decided:
            fatal, limit = follower.cause(engine.unit, run_start=run_start)
            return unitnow.UnitNow(props, fatal, limit, job).of(engine.unit)
        # Nothing follows the unit (or it did not say in time): one journal read.
        fatal, limit = self.journal.cause(engine.unit, run_start=run_start) if self.journal is not None else ("", "")
        read_fatal, read_limit, read_job = unitnow._journal_lines(engine, since=since)
        return unitnow.UnitNow(props, fatal or read_fatal, limit or read_limit, job or read_job).of(engine.unit)

    def _settled_props(self, engine, pid, deadline):
        """(ENGINE's `systemctl show` once systemd has settled PID's exit, when a job was seen
        running on the unit meanwhile (wall seconds) or None). Settled: neither still running the
        dead pid nor deactivating (an ExecStopPost= such as the stop hook runs then, and the
        unit's Result= is only final after it); a read that fails is tried again, PROPS_TRIES in all."""
        props = unitnow._props(engine)
        tries = 1
        job_running = time.time() if props is not None and props.get("Job") else None
        while pid is not None and time.monotonic() < deadline:
            if props is None:
                if tries >= PROPS_TRIES:
                    log.warning(
                        "resident poller (%s): %s: systemctl show failed %d times after its exit; judged without it",
                        self.host_name,
                        engine.name,
                        tries,
                    )
                    break
            elif not (
                (props.get("ActiveState") == "active" and props.get("MainPID") == pid)
                or props.get("ActiveState") == "deactivating"
            ):
                break
            self._stop.wait(0.01)
            props = unitnow._props(engine)
            tries += 1
            if job_running is None and props is not None and props.get("Job"):
                job_running = time.time()
        return props, job_running


def _since(entries, since):
    """The journal ENTRIES logged at or after SINCE (wall seconds)."""
    return [e for e in entries if unitnow._int(e.get("__REALTIME_TIMESTAMP")) >= since * 1e6]


def _job_from_timestamps(props, pid=None):
    """(job, decided) from a unit still loaded after its main process exited: a stop job moves it
    out of the active state before its process exits (ActiveExitTimestamp earlier than
    ExecMainExitTimestamp), an exit of the process's own moves it after (systemd stamps the exit,
    then leaves active). Undecided when the unit was collected (no InvocationID: `systemctl show`
    then reads a blank unit) or a timestamp is missing; a unit running again is decided by its run."""
    if not props or not props.get("InvocationID"):
        return None, False
    running = props.get("ActiveState") in ("active", "activating")
    if running and not props.get("ExecMainExitTimestamp") and props.get("MainPID") != pid:
        return None, True  # a new run: whose it is, NRestarts and the run's start say (rules/engine.py)
    left = parse_timestamp(props.get("ActiveExitTimestamp") or "")
    exited = parse_timestamp(props.get("ExecMainExitTimestamp") or "")
    if left is None or exited is None:
        return None, False
    if left < exited:
        return unitnow.Job("stop", left.timestamp(), True), True
    return None, True
