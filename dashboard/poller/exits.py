"""The poller's side of a death seen at once (`ExitPath`, mixed into the ResidentPoller).

The exit watch (`exitwatch.py`: a pidfd for each watched unit's main process and its
engine-core children, and the units' journal followed) calls `exit_seen` from its own thread
when a watched process exits. It makes the same finding a failed probe makes, evaluated under
the probe's lock, so a death is one alert whichever saw it first (the unit, which may take up to
EXIT_SETTLE_S to settle, is read outside the lock); the probe stays the backstop and sees hangs.
Every metrics tick re-arms the watch with the MainPIDs it read (`_rearm`)."""

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from dashboard.alerts.evaluate import evaluate_liveness
from dashboard.alerts.models import Delivery
from dashboard.alerts.outbox import delivery_send
from dashboard.collectors import unitnow
from dashboard.poller import exitwatch, liveness, stopsocket

if TYPE_CHECKING:
    from dashboard.alerts.evaluate import Memory
    from dashboard.live.publish import LivePublisher
    from dashboard.models import Engine
    from dashboard.poller.exitwatch import ExitWatcher, JournalFollower
    from dashboard.poller.lease import PollerLease
    from dashboard.poller.stopsocket import Stop, StopListener

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

    def _rearm(self, own, units, polled):
        """Point the exit watcher at the main processes this tick's `systemctl show` read and the
        journal follower at the units; say on each polled engine's reading how it is watched."""
        mains = {}
        self.units_seen = {e.pk: units[e.unit] for e in own if e.unit and units.get(e.unit)}
        if self.exit_watch is not None:
            mains = {e.pk: (units.get(e.unit) or {}).get("MainPID") or 0 for e in own if e.unit}
            self.exit_watch.watch(mains)
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
            fatal, limit = self.journal.cause(engine.unit) if self.journal is not None else ("", "")
            if not fatal:  # the follower may not have the last lines yet: one journalctl, as the pidfd path
                fatal, limit = unitnow._journal_lines(engine)
            return unitnow.UnitNow(stopsocket.unit_at_stop(stop, last), fatal, limit)

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
                finding = liveness.liveness_record(liveness.Liveness(engine, "down", reason, True, timezone.now()))
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
        most EXIT_SETTLE_S), with the cause lines the journal follower already holds (read from
        the journal only when it holds none)."""

        deadline = time.monotonic() + EXIT_SETTLE_S
        props = unitnow._props(engine)
        # Settled: neither still running the dead pid nor deactivating (an ExecStopPost= such as the stop
        # hook runs then, and the unit's Result= is only final after it).
        while (
            pid is not None
            and props is not None
            and (
                (props.get("ActiveState") == "active" and props.get("MainPID") == pid)
                or props.get("ActiveState") == "deactivating"
            )
            and time.monotonic() < deadline
        ):
            self._stop.wait(0.01)
            props = unitnow._props(engine)
        fatal, limit = self.journal.cause(engine.unit) if self.journal is not None else ("", "")
        if not fatal:
            fatal, limit = unitnow._journal_lines(engine)
        return unitnow.UnitNow(props, fatal, limit)
