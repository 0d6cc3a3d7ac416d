"""A poller's alert memory that goes on while the database is away (`HeldMemory`).

`evaluate.Memory` already keeps the rule rows, the rule memories and the open events between a
poller's ticks; read again when their time is up, they cost a query each, and with the database
stopped each query waited 10 s on the pool and then failed, so no rule was evaluated and a death
went unpaged for the outage (issue 46). `HeldMemory` asks the process's database gate first
(`dashboard.dbgate.GATE`): while the database is away it evaluates with what it read last, and
a rule that fires goes to the worker's spool (`spool.py`), which pages from there and writes the
alert, with the time it was seen, when the database returns."""

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import DatabaseError

from dashboard.dbgate import CHECK_EVERY_S, GATE

from .evaluate import Memory, _rule_rows
from .finding import Finding
from .lifecycle import alert_observe
from .models import AlertEvent, RuleState
from .spool import Spool, seen_time

log = logging.getLogger(__name__)
KNOWN = float("inf")  # GATE.away(max_age=KNOWN): the verdict as last known, without a check


class HeldMemory(Memory):
    """`Memory` for a resident poller with a SPOOL: see the module's docstring."""

    def __init__(self, spool: Spool | None = None):
        super().__init__()
        self._config_ttl_s = Memory.config_ttl_s
        self.spool = spool
        self.liveness = LivenessView(self)
        self.held_pending: dict[tuple[str, str], datetime] = {}  # (rule, subject) -> first seen, not yet due

    @property
    def config_ttl_s(self) -> float:
        """While the database is away, what was read stays good: whoever caches by this memory's
        TTL (the rule rows, the operator's own rules in alerts/custom.py) keeps it rather than
        wait on the pool for a database that is not there. The verdict as last known: asked
        several times a tick, a check each time opened a connection a second; the read that a
        TTL makes due checks first (`read_config`, `_or_kept`)."""
        return float("inf") if GATE.away(max_age=KNOWN) else self._config_ttl_s

    @config_ttl_s.setter
    def config_ttl_s(self, value: float) -> None:
        self._config_ttl_s = value

    # Reads: the database's when it answers, else what was read last.
    def open_events(self, now):
        due = self.open is None or now - self.open_read_at >= self.open_ttl_s or self._routing_due()

        def read():
            events = super(HeldMemory, self).open_events(now)
            self.routing_refresh()  # every metrics tick asks: a worker just started knows where to page
            return events

        return self._or_kept(read, lambda: self.open, "open alerts", due=due, cached=not due)

    def rule_rows(self, keys, engine_ids, host_ids, now):
        cached = self.config.get((keys, engine_ids, host_ids))
        due = cached is None or now - cached[0] >= self._config_ttl_s

        def read():
            cached = self.config.get((keys, engine_ids, host_ids))
            fresh = cached is None or now - cached[0] >= self.config_ttl_s
            rows = super(HeldMemory, self).rule_rows(keys, engine_ids, host_ids, now)
            if fresh:
                self.routing_refresh()
            return rows

        def kept():
            cached = self.config.get((keys, engine_ids, host_ids))
            return (cached[1], cached[2]) if cached is not None else ({}, {})  # none read: the rules' defaults

        return self._or_kept(read, kept, "alert rules", due=due, cached=not due)

    def states(self, keys, names, now):
        due = any(
            (k, n) not in self.memories or now - self.memories[(k, n)][0] >= self.states_ttl_s
            for k in keys
            for n in names
        )

        def kept():
            return {
                (k, n): self.memories[(k, n)][1] if (k, n) in self.memories else self._blank(k, n)
                for k in keys
                for n in names
            }

        return self._or_kept(
            lambda: super(HeldMemory, self).states(keys, names, now), kept, "alert memories", due=due, cached=not due
        )

    def read_config(self, read: Callable[[], Any], kept: Callable[[], Any]) -> Any:
        """READ() (a configuration read whose TTL is up), the database checked first: KEPT() while
        it is away. READ's own failure is its caller's to handle."""
        return kept() if GATE.away(max_age=0.0) else read()

    def to_save(self, dirty):
        if GATE.away(max_age=KNOWN):
            self.unsaved.update(dirty)  # written with the next save once the database is back
            return {}
        pending = super().to_save(dirty)
        if pending and GATE.away():  # checked only when there is something to write (seldom)
            self.unsaved.update(pending)
            return {}
        return pending

    def routing_refresh(self) -> None:
        """Read the channels, routes and silences again (with the rules, every config_ttl_s at
        most): what a page from the spool needs."""
        if self.spool is not None and self._routing_due():
            self.spool.routing_refresh()

    def _routing_due(self) -> bool:
        return self.spool is not None and time.monotonic() - self.spool.routing.read_at >= self.config_ttl_s

    def liveness_view(self):
        return self.liveness

    @staticmethod
    def _blank(rule, subject):
        return RuleState(rule=rule, subject=subject)

    def _or_kept(
        self, read: Callable[[], Any], kept: Callable[[], Any], what: str, due: bool = False, cached: bool = False
    ) -> Any:
        """READ() when the database answers, else KEPT(). DUE: READ will query (its cache is
        stale), so the database is checked now rather than by a verdict up to a second old.
        CACHED: READ answers from what is kept here, without a query: the verdict as known is
        enough (a check is a connection of its own, and most ticks read nothing)."""
        if not GATE.away(max_age=KNOWN if cached else 0.0 if due else CHECK_EVERY_S):
            try:
                value = read()
            except DatabaseError as exc:
                if not GATE.failed(exc):
                    raise
                log.warning("%s not read (%s): evaluating with what was read last", what, GATE.why)
            else:
                if not cached:  # it read: the database answered just now
                    GATE.answered()
                return value
        value = kept()
        if value is None:
            return {}
        return value

    # Writes: the event, or the spool.
    def observe(self, *, rule, finding, severity, for_s=0.0, now=None, known=None):  # type: ignore[override]
        """`alert_observe`, or while the database is away the spool: a finding that fires is
        paged from there (once: the spool and the open alerts read before, KNOWN or this
        memory's, say what already is)."""
        if self.spool is None or not GATE.away():
            self.catch_up()  # what the spool holds goes first: this finding may be about the same alert
        if self.spool is None or not GATE.away():
            try:
                event = alert_observe(rule=rule, finding=finding, severity=severity, for_s=for_s, now=now)
            except DatabaseError as exc:
                if self.spool is None or not GATE.failed(exc):
                    raise
            else:
                self.held_pending.pop((rule, finding.subject), None)
                return event
        return self._hold(rule, finding, severity, for_s, self.open if known is None else known)

    def catch_up(self) -> int:
        """Write what the spool holds (the database is back); how many alerts. A failure marks
        the database away again and keeps them."""
        if self.spool is None or not len(self.spool):
            return 0
        try:
            done = self.spool.catch_up()
        except DatabaseError as exc:
            if not GATE.failed(exc):
                raise
            return 0
        GATE.reachable()
        self.open = None  # the events just written: read them with the next evaluation
        return done

    def _hold(self, rule: str, finding: Finding, severity: str, for_s: float, known) -> AlertEvent | None:
        assert self.spool is not None
        key = (rule, finding.subject)
        event = (known or {}).get(key)
        if not finding.active:
            self.held_pending.pop(key, None)
            self.spool.resolve_seen(rule=rule, finding=finding, seen=datetime.now(UTC))
            return event
        if self.spool.holding(rule, finding.subject) is not None:
            return event  # paged from the spool already
        if event is not None and event.state == AlertEvent.State.FIRING:
            return event  # paged before the outage; its record catches up after
        seen = seen_time(finding)
        if event is not None:
            seen = min(seen, event.started_at)  # pending since before the outage
        first = self.held_pending.setdefault(key, seen)
        wait = finding.for_s if finding.for_s is not None else for_s
        if not (finding.fire_now or datetime.now(UTC) - first >= timedelta(seconds=wait)):
            return event  # not due yet: a later finding fires it
        self.held_pending.pop(key, None)
        self.spool.hold(rule=rule, finding=finding, severity=finding.severity or severity, seen=first)
        return event

    def held_state(self) -> dict:
        """For the logs and /healthz: the alerts the spool holds and since when the database is away."""
        return {"database": GATE.state(), "alerts_held": len(self.spool) if self.spool is not None else 0}


class LivenessView:
    """What a probe's (or an exit's) evaluation reads through, for a HeldMemory: the database
    afresh, as `evaluate` reads it without a memory (a death is judged on the rows as they are
    now), and kept; while the database is away, what was kept. What fires goes to the spool."""

    def __init__(self, held: HeldMemory):
        self.held = held
        self.stored: set[tuple[str, str]] = set()
        self.config: dict[tuple, tuple] = {}
        self.kept: dict[tuple[str, str], Any] = {}  # (rule, subject) -> RuleState, as last read or changed
        self.unsaved: dict[tuple[str, str], Any] = {}
        self.open: dict[tuple[str, str], AlertEvent] = {}

    def rule_rows(self, keys, engine_ids, host_ids, _now):
        def read():
            self.config[(keys, engine_ids, host_ids)] = _rule_rows(keys, engine_ids, host_ids)
            self.held.routing_refresh()
            return self.config[(keys, engine_ids, host_ids)]

        return self.held._or_kept(read, lambda: self.config.get((keys, engine_ids, host_ids), ({}, {})), "alert rules")

    def states(self, keys, names, _now):
        def read():
            rows = {(r.rule, r.subject): r for r in RuleState.objects.filter(rule__in=keys, subject__in=names)}
            self.kept.update({pair: row for pair, row in rows.items() if pair not in self.unsaved})
            return {pair: row for pair, row in self.kept.items() if pair[0] in keys and pair[1] in names}

        def kept():
            return {pair: row for pair, row in self.kept.items() if pair[0] in keys and pair[1] in names}

        return self.held._or_kept(read, kept, "alert memories")

    def open_events(self, _now):
        def read():
            self.open = {
                (e.rule, e.subject): e for e in AlertEvent.objects.filter(state__in=AlertEvent.OPEN_STATES).order_by()
            }
            return self.open

        return self.held._or_kept(read, lambda: self.open, "open alerts")

    def to_save(self, dirty):
        """Every change, at once, as without a memory; kept (and written later) while away."""
        self.kept.update(dirty)
        self.unsaved.update(dirty)
        if GATE.away():
            return {}
        pending, self.unsaved = self.unsaved, {}
        return pending

    def observe(self, **kwargs):
        return self.held.observe(**kwargs, known=self.open)


__all__ = ["HeldMemory", "LivenessView"]
