"""Run the rules of one trigger and feed their findings to the lifecycle.

This runs on every liveness probe (each second per engine) and, for all the engines a metrics
cycle polled at once, every 2 s; so a whole batch of subjects costs a constant number of
queries: the rule rows (with whether any of them has an override for these subjects), the
overrides only when there are some, the rule memories and the open events, one query each,
then the changed rule memories in one upsert. An inactive finding with nothing open costs
nothing more, nor does an active one whose open event it would not change."""

import copy
import logging
import marshal
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from django.db.models import Exists, OuterRef, Q

from dashboard.clock import shared_now

from .custom import custom_rules
from .finding import Finding
from .lifecycle import alert_observe, newest
from .models import AlertEvent, AlertRule, AlertRuleOverride, RuleState
from .rule_config import rule_settings
from .rules import REGISTRY
from .rules.base import Rule

if TYPE_CHECKING:
    from dashboard.models import Engine, Host
    from sparkops.collectors.derive import EngineReading
    from sparkops.collectors.unitnow import UnitNow

log = logging.getLogger(__name__)

T = TypeVar("T")
Pair = tuple[str, str]  # (rule key, subject name)
ConfigKey = tuple[tuple[str, ...], frozenset[int], frozenset[int]]  # (rule keys, engine ids, host ids)
RuleRows = dict[str, AlertRule]
Overrides = dict[tuple[str, str, int], AlertRuleOverride]  # (rule key, "engine"|"host", id)


class Memory:
    """What a caller that evaluates the same subjects tick after tick keeps between calls: a
    resident poller owns one (`ResidentPoller.alerts`); a one-off evaluation (a web request,
    `poll --once`, beat) passes none and reads everything afresh.

    - the rule rows and overrides, re-read after `config_ttl_s`: a rule edited on the web
      applies to the pollers within that;
    - the rule memories, which only the poller writes: read once (again after `states_ttl_s`),
      written when first made, then at most every `states_save_s` (a crash loses that much of
      a window);
    - the open events, read for all its evaluations every `open_ttl_s`. Those its own findings
      change are kept current in place; one acknowledged or resolved elsewhere meanwhile is
      seen that much later (an active finding then re-opens it; a cleared one resolves it from
      the row itself, as `alert_observe` reads it under lock);
    - the liveness it last evaluated per engine, so a probe that finds an engine up, as it was,
      skips the rule queries (`worth_evaluating`)."""

    config_ttl_s = 15.0
    states_ttl_s = 60.0
    states_save_s = 10.0
    open_ttl_s = 5.0
    # A steady "up" is still evaluated now and then, so nothing left open by a lost
    # evaluation outlives a restart for long.
    steady_up_every_s = 30.0

    def __init__(self) -> None:
        self.config: dict[ConfigKey, tuple[float, RuleRows, Overrides]] = {}  # -> (read at, rows, overrides)
        self.memories: dict[Pair, tuple[float, RuleState]] = {}  # (rule, subject) -> (read at, row)
        self.stored: set[Pair] = set()  # pairs whose memory has a row
        self.unsaved: dict[Pair, RuleState] = {}  # changed memories not written yet
        self.saved_at = float("-inf")
        self.open: dict[Pair, AlertEvent] | None = None
        self.open_read_at = float("-inf")
        self.last_up: dict[int, bool] = {}  # engine pk -> the liveness last evaluated
        # engine pk -> (up, since when probes have found it so): kept whether or not the
        # evaluation could be written, so a death seen during a database outage starts then.
        self.seen_since: dict[int, tuple[bool, datetime]] = {}
        self.steady_at: dict[int, float] = {}  # engine pk -> when a steady "up" was last evaluated
        # engine pk -> when (wall seconds) a probe last found it up: a process its unit started
        # after that has never answered, so its silence is a start, not a hang or a lie.
        self.up_at: dict[int, float] = {}
        self.custom_rules: dict[
            str, tuple[float, list[Rule]]
        ] = {}  # signal -> (read at, the operator's rules): custom.py

    def open_events(self, now: float) -> dict[Pair, AlertEvent]:
        if self.open is None or now - self.open_read_at >= self.open_ttl_s:
            # Every rule's: the host and the engines of a few ticks share this read.
            self.open = {
                (e.rule, e.subject): e for e in AlertEvent.objects.filter(state__in=AlertEvent.OPEN_STATES).order_by()
            }
            self.open_read_at = now
        return self.open

    def rule_rows(
        self, keys: tuple[str, ...], engine_ids: frozenset[int], host_ids: frozenset[int], now: float
    ) -> tuple[RuleRows, Overrides]:
        cached = self.config.get((keys, engine_ids, host_ids))
        if cached is not None and now - cached[0] < self.config_ttl_s:
            return cached[1], cached[2]
        rows, overrides = _rule_rows(keys, engine_ids, host_ids)
        self.config[(keys, engine_ids, host_ids)] = (now, rows, overrides)
        return rows, overrides

    def states(self, keys: Iterable[str], names: Iterable[str], now: float) -> dict[Pair, RuleState]:
        """{(rule, subject): RuleState} for every pair, read only where not remembered (or too long ago)."""
        pairs = [(key, name) for key in keys for name in names]
        stale = [
            pair for pair in pairs if pair not in self.memories or now - self.memories[pair][0] >= self.states_ttl_s
        ]
        if stale:
            rows = {
                (s.rule, s.subject): s
                for s in RuleState.objects.filter(rule__in={k for k, _ in stale}, subject__in={n for _, n in stale})
            }
            for pair in stale:
                if pair in self.unsaved:  # this memory is newer than the row
                    self.memories[pair] = (now, self.unsaved[pair])
                    continue
                row = rows.get(pair)
                if row is not None:
                    self.stored.add(pair)
                self.memories[pair] = (now, row or RuleState(rule=pair[0], subject=pair[1]))
        return {pair: self.memories[pair][1] for pair in pairs}

    def to_save(self, dirty: dict[Pair, RuleState]) -> dict[Pair, RuleState]:
        """The memories to write now (all that changed since the last write), or {} to wait."""
        self.unsaved.update(dirty)
        now = time.monotonic()
        if not self.unsaved or (now - self.saved_at < self.states_save_s and all(p in self.stored for p in dirty)):
            return {}
        pending, self.unsaved, self.saved_at = self.unsaved, {}, now
        return pending

    def read_config(self, read: Callable[[], T], kept: Callable[[], T | None]) -> T | None:  # noqa: ARG002 (held.HeldMemory's uses KEPT)
        """READ(): a configuration read whose TTL is up (the operator's own rules, alerts/custom.py);
        `held.HeldMemory` checks the database first and answers KEPT() while it is away."""
        return read()

    def liveness_view(self) -> "Memory | None":
        """What a probe's evaluation reads through: None, the database afresh (a death is judged
        on the rows as they are now); `held.HeldMemory`'s goes on with what it read last while
        the database is away, and holds what fires in its spool."""
        return None

    def observe(self, **kwargs: Any) -> AlertEvent | None:
        """`alert_observe` for this memory's findings; `held.HeldMemory` (a resident poller's)
        holds them in its spool and pages from there while the database is away."""
        return alert_observe(**kwargs)

    def worth_evaluating(self, engine: "Engine", up: bool, changed: bool) -> bool:
        """Whether a probe's liveness could change anything: not when it found the engine up,
        as last evaluated here, unless a steady "up" is due. The first "up" after a "down" is
        always evaluated, whoever moved Engine.status (a metrics poll may see the recovery
        before the probe does, so `changed` alone would miss it)."""
        now = time.monotonic()
        if (
            not up
            or changed
            or self.last_up.get(engine.pk) is not True
            or now - self.steady_at.get(engine.pk, float("-inf")) >= self.steady_up_every_s
        ):
            self.steady_at[engine.pk] = now
            return True
        return False


class _Subject:
    """One engine, one host or nothing (beat), and the rest of its trigger's context (e.g. reading)."""

    def __init__(self, subject: Mapping[str, Any]) -> None:
        context = dict(subject)
        self.engine: Engine | None = context.pop("engine", None)
        self.host: Host | None = context.pop("host", None)
        self.observed_at: datetime | None = context.pop("observed_at", None)  # when its reading was taken
        self.context = context
        self.name = self.engine.name if self.engine is not None else self.host.name if self.host is not None else "*"

    def override_key(self, rule_key: str) -> tuple[str, str, int] | None:
        if self.engine is not None:
            return (rule_key, "engine", self.engine.pk)
        if self.host is not None:
            return (rule_key, "host", self.host.pk)
        return None

    def owns(self, event: AlertEvent) -> bool:
        """Whether EVENT is this subject's (a switched-off rule resolves those)."""
        if self.engine is not None:
            return event.engine_id == self.engine.pk
        if self.host is not None:
            return event.host_id == self.host.pk
        return True


class _Snapshot:
    """What the rules of one trigger need from the database about a batch of subjects."""

    def __init__(self, rules: Sequence[Rule], subjects: Sequence["_Subject"], memory: Memory | None = None) -> None:
        keys = tuple(sorted(r.key for r in rules))
        engine_ids = frozenset(s.engine.pk for s in subjects if s.engine is not None)
        host_ids = frozenset(s.host.pk for s in subjects if s.host is not None)
        names = frozenset(s.name for s in subjects)
        now = time.monotonic()
        self.memory = memory
        if memory is not None:
            self.rows, self.overrides = memory.rule_rows(keys, engine_ids, host_ids, now)
            self.states = memory.states(keys, names, now)
            self.open = memory.open_events(now)
        else:
            self.rows, self.overrides = _rule_rows(keys, engine_ids, host_ids)
            self.states = {(s.rule, s.subject): s for s in RuleState.objects.filter(rule__in=keys, subject__in=names)}
            # Every open event of these rules (not only these subjects': a finding may name another subject).
            self.open = {
                (e.rule, e.subject): e
                for e in AlertEvent.objects.filter(rule__in=keys, state__in=AlertEvent.OPEN_STATES).order_by()
            }
        self.dirty: dict[Pair, RuleState] = {}

    def state(self, rule_key: str, subject: str) -> RuleState:
        key = (rule_key, subject)
        if key not in self.states:
            self.states[key] = RuleState(rule=rule_key, subject=subject)
        return self.states[key]

    def observed(self, rule_key: str, subject: str, event: AlertEvent | None) -> None:
        """Keep the open events current within the batch, as separate evaluations would read them."""
        if event is not None and event.is_open:
            self.open[(rule_key, subject)] = event
        else:
            self.open.pop((rule_key, subject), None)

    def save_states(self) -> None:
        """The rule memories that changed, new or not, in one upsert (with a memory: see `Memory`)."""
        dirty = self.memory.to_save(self.dirty) if self.memory is not None else self.dirty
        if not dirty:
            return
        rows = [RuleState(rule=rule, subject=subject, data=row.data) for (rule, subject), row in dirty.items()]
        try:
            RuleState.objects.bulk_create(
                rows, update_conflicts=True, unique_fields=["rule", "subject"], update_fields=["data", "updated_at"]
            )
        except Exception:
            log.exception("alert rule memories of %s not saved", sorted(dirty))
        else:
            if self.memory is not None:
                self.memory.stored.update(dirty)


def _rule_rows(
    keys: tuple[str, ...], engine_ids: frozenset[int], host_ids: frozenset[int]
) -> tuple[RuleRows, Overrides]:
    """({key: AlertRule}, {(key, "engine"|"host", id): AlertRuleOverride}) for these subjects."""
    mine = Q()  # the overrides of these subjects
    if engine_ids:
        mine |= Q(engine_id__in=engine_ids)
    if host_ids:
        mine |= Q(host_id__in=host_ids)
    query = AlertRule.objects.filter(key__in=keys)
    if engine_ids or host_ids:
        query = query.annotate(has_override=Exists(AlertRuleOverride.objects.filter(mine, rule=OuterRef("pk"))))
    rows: RuleRows = {r.key: r for r in query}
    overrides: Overrides = {}
    overridden = {r.pk: r.key for r in rows.values() if getattr(r, "has_override", False)}
    if overridden:  # seldom: most rules have no per-engine or per-host override
        for o in AlertRuleOverride.objects.filter(mine, rule_id__in=overridden):
            if o.engine_id is not None:
                overrides[(overridden[o.rule_id], "engine", o.engine_id)] = o
            if o.host_id is not None:
                overrides[(overridden[o.rule_id], "host", o.host_id)] = o
    return rows, overrides


def rules_for(signal: str, *, memory: Memory | None = None) -> list[Rule]:
    """The built-in rules of SIGNAL, then the operator's own (alerts/custom.py; MEMORY: a poller's cache)."""
    return [rule for rule in REGISTRY.values() if rule.signal == signal] + custom_rules(signal, memory=memory)


def evaluate_many(
    signal: str, subjects: Sequence[Mapping[str, Any]], *, memory: Memory | None = None
) -> list[AlertEvent]:
    """Evaluate every rule of SIGNAL for each of SUBJECTS, e.g. [{"engine": engine, "reading": {...}}, ...]
    (or host=...; the other keys are the rules' context), with the same queries for one subject as for
    many; one rule's bug never stops the others. Returns the events the findings touched.
    MEMORY: what a caller that evaluates these subjects again and again, and alone (a resident
    poller), keeps between calls (see `Memory`); None reads everything afresh."""
    rules = rules_for(signal, memory=memory)
    if not rules or not subjects:
        return []
    batch = [_Subject(s) for s in subjects]
    snap = _Snapshot(rules, batch, memory=memory)
    events: list[AlertEvent] = []
    for subject in batch:
        for rule in rules:
            try:
                events.extend(_evaluate_rule(rule, snap, subject))
            except Exception:
                log.exception("alert rule %s failed", rule.key)
    snap.save_states()
    return events


def evaluate(
    signal: str,
    *,
    engine: "Engine | None" = None,
    host: "Host | None" = None,
    memory: Memory | None = None,
    **context: Any,
) -> list[AlertEvent]:
    """Evaluate every rule of SIGNAL for one subject; one rule's bug never stops the others."""
    return evaluate_many(signal, [{"engine": engine, "host": host, **context}], memory=memory)


def _evaluate_rule(rule: Rule, snap: _Snapshot, subject: _Subject) -> list[AlertEvent]:
    settings = rule_settings(
        rule,
        engine=subject.engine,
        host=subject.host,
        row=snap.rows.get(rule.key, False),
        override=_override_of(snap, subject, rule.key),
    )
    if not settings.enabled:  # nothing open under this rule (the usual case): no query at all
        return _resolve_all(rule, snap, subject)
    state_row = snap.state(rule.key, subject.name)
    before = _deep_copy(state_row.data)
    findings = rule.evaluate(
        settings=settings, engine=subject.engine, host=subject.host, state=state_row.data, **subject.context
    )
    if state_row.data != before:
        snap.dirty[(rule.key, subject.name)] = state_row
    for_s = float(settings.params.get("for_s", 0))
    events: list[AlertEvent] = []
    for finding in findings:
        if finding.observed_at is None:
            finding.observed_at = subject.observed_at
        event = snap.open.get((rule.key, finding.subject))
        if event is None and not finding.active:
            continue
        if event is not None and finding.active and _observing_changes_nothing(event, finding, for_s):
            events.append(event)
            continue
        observe = snap.memory.observe if snap.memory is not None else alert_observe
        event = observe(rule=rule.key, finding=finding, severity=settings.severity, for_s=for_s)
        snap.observed(rule.key, finding.subject, event)
        if event is not None:  # None: a dropped finding (a retired engine's) or a pending blip gone
            events.append(event)
    return events


def _override_of(snap: _Snapshot, subject: _Subject, rule_key: str) -> AlertRuleOverride | Literal[False]:
    """SUBJECT's override of the rule, or False: known to have none (a beat's subject has none)."""
    key = subject.override_key(rule_key)
    return snap.overrides.get(key, False) if key is not None else False


def _deep_copy(data: Any) -> Any:
    """A rule memory is JSON (lists of samples): marshal copies it ~10x faster than repr() prints it."""
    try:
        return marshal.loads(marshal.dumps(data))
    except ValueError:
        return copy.deepcopy(data)


def _observing_changes_nothing(event: AlertEvent, finding: Finding, for_s: float) -> bool:
    """Whether alert_observe would leave this open EVENT as it is (it would only lock and read it again):
    nothing new to say and, while pending, not yet due to fire. Mirrors lifecycle._refresh and its firing test."""
    if event.state == AlertEvent.State.FIRING:  # it keeps what it fired with; the newest finding goes beside it
        cause, message, details = newest(event)
    else:
        cause, message, details = event.cause, event.message, event.details
    if (finding.cause and finding.cause != cause) or (finding.message and finding.message != message):
        return False
    if finding.details != details:
        return False
    if event.state == AlertEvent.State.FIRING:
        return True
    wait = finding.for_s if finding.for_s is not None else for_s
    return (
        event.state == AlertEvent.State.PENDING
        and not finding.fire_now
        and (shared_now() - event.started_at).total_seconds() < wait  # started_at is the database's time
    )


def _resolve_all(rule: Rule, snap: _Snapshot, subject: _Subject) -> list[AlertEvent]:
    """A rule switched off closes its open events for this subject."""
    events: list[AlertEvent] = []
    for event in [e for (key, _), e in snap.open.items() if key == rule.key and subject.owns(e)]:
        resolved = alert_observe(
            rule=rule.key, finding=Finding(subject=event.subject, active=False), severity=event.severity
        )
        snap.observed(rule.key, event.subject, resolved)
        if resolved is not None:
            events.append(resolved)
    return events


def evaluate_beat(*, memory: Memory | None = None) -> list[AlertEvent]:
    """The rules of trigger "beat" (the collector-stale check): beat's backstop passes no MEMORY;
    the leading worker's upkeep passes its poller's."""
    return evaluate("beat", memory=memory)


# --- what a poller's tick evaluates -------------------------------------------------


def evaluate_polled(
    polled: Iterable[tuple["Engine", "EngineReading | None"]], *, memory: Memory | None = None
) -> list[AlertEvent]:
    """The rules of a metrics tick (trigger "engine_polled") for all its engines in one batch:
    the same few queries for 1 engine as for 150. POLLED: (Engine, reading) pairs."""
    return evaluate_many(
        "engine_polled",
        [
            {"engine": engine, "reading": reading or {}, "observed_at": engine.last_poll_at}
            for engine, reading in polled
        ],
        memory=memory,
    )


def evaluate_host(
    host: "Host",
    reading: Mapping[str, Any] | None,
    *,
    memory: Memory | None = None,
    observed_at: datetime | None = None,
) -> list[AlertEvent]:
    """OBSERVED_AT: when READING was taken (its alerts start then)."""
    return evaluate("host_polled", host=host, reading=reading or {}, memory=memory, observed_at=observed_at)


class ProbeFinding(Protocol):
    """What a probe's rules read of its finding: a `poller/liveness.Liveness` (the poller
    calls the alerts, so they name it by its shape)."""

    @property
    def engine(self) -> "Engine": ...
    @property
    def up(self) -> bool: ...
    @property
    def reason(self) -> str: ...
    @property
    def rechecked(self) -> bool: ...
    @property
    def checked_at(self) -> datetime: ...
    @property
    def changed(self) -> bool: ...
    @property
    def unit_now(self) -> "UnitNow | None": ...
    @property
    def box_unreachable_since(self) -> datetime | None: ...


def evaluate_liveness(finding: ProbeFinding, *, memory: Memory) -> None:
    """A probe's rules, run in the probing worker so a confirmed death is an outbox row at once
    and a webhook the moment its transaction commits. FINDING: a `poller/liveness.Liveness`."""
    engine = finding.engine
    if finding.up:  # when it answered, not when this evaluation runs (a restart may lie between)
        memory.up_at[engine.pk] = finding.checked_at.timestamp()
    seen = memory.seen_since.get(engine.pk)
    if seen is None or seen[0] != finding.up:
        seen = memory.seen_since[engine.pk] = (finding.up, finding.checked_at)
    if memory.worth_evaluating(engine, finding.up, finding.changed):
        evaluate(
            "engine_liveness",
            engine=engine,
            up=finding.up,
            reason=finding.reason,
            rechecked=finding.rechecked,
            unit_now=finding.unit_now,
            box_unreachable_since=finding.box_unreachable_since,
            observed_at=seen[1],
            last_up_at=memory.up_at.get(engine.pk),
            memory=memory.liveness_view(),
        )
    memory.last_up[engine.pk] = (
        finding.up
    )  # only once evaluated: a failed evaluation of a recovery is retried next probe
