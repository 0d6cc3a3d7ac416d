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
import threading
import time

from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from .config import rule_settings
from .lifecycle import Finding, alert_observe
from .models import AlertEvent, AlertRule, AlertRuleOverride, RuleState
from .rules import rules_for

log = logging.getLogger(__name__)

# A resident poller evaluates the same rules for the same subjects every tick. Its calls
# (`remember=True`, on the poller's metrics thread) keep between ticks:
# - the rule rows and overrides, re-read after CONFIG_TTL_S or at once when this process saves one;
# - the rule memories, which only these calls write: read once (again after STATES_TTL_S), and
#   written when first made, then at most every STATES_SAVE_S (a crash loses that much of a window);
# - the open events, read for all its evaluations every OPEN_TTL_S. Those its own findings
#   change are kept current in place; one acknowledged or resolved elsewhere meanwhile is seen
#   that much later (an active finding then re-opens it; a cleared one resolves it from the
#   row itself, as `alert_observe` reads it under lock).
CONFIG_TTL_S = 15.0
STATES_TTL_S = 60.0
STATES_SAVE_S = 10.0
OPEN_TTL_S = 5.0
_config = {}  # (rule keys, engine ids, host ids) -> (read at, rows, overrides)
_memories = {}  # (rule key, subject name) -> (read at, RuleState)
_stored = set()  # (rule key, subject name) pairs whose memory has a row
_unsaved = {"pairs": {}, "saved_at": float("-inf")}  # changed memories not written yet
_open = threading.local()  # .events: {(rule, subject): AlertEvent}, .read_at


def forget_config():
    """A rule or override was saved: read the rows again."""
    _config.clear()


def forget():
    """Drop everything remembering evaluations kept (tests; unsaved memories are lost)."""
    _config.clear()
    _memories.clear()
    _stored.clear()
    _unsaved["pairs"].clear()
    _unsaved["saved_at"] = float("-inf")
    _open.__dict__.clear()


def _open_events(keys, remember, now):
    if not remember:
        return {(e.rule, e.subject): e for e in AlertEvent.objects.filter(rule__in=keys, state__in=AlertEvent.OPEN_STATES).order_by()}
    if getattr(_open, "events", None) is None or now - _open.read_at >= OPEN_TTL_S:
        # Every rule's: the host and the engines of a few ticks share this read.
        _open.events = {(e.rule, e.subject): e for e in AlertEvent.objects.filter(state__in=AlertEvent.OPEN_STATES).order_by()}
        _open.read_at = now
    return _open.events


class _Subject:
    """One engine, one host or nothing (beat), and the rest of its trigger's context (e.g. reading)."""

    def __init__(self, subject):
        context = dict(subject)
        self.engine = context.pop("engine", None)
        self.host = context.pop("host", None)
        self.context = context
        self.name = self.engine.name if self.engine is not None else self.host.name if self.host is not None else "*"

    def override_key(self, rule_key):
        if self.engine is not None:
            return (rule_key, "engine", self.engine.pk)
        if self.host is not None:
            return (rule_key, "host", self.host.pk)
        return None

    def owns(self, event):
        """Whether EVENT is this subject's (a switched-off rule resolves those)."""
        if self.engine is not None:
            return event.engine_id == self.engine.pk
        if self.host is not None:
            return event.host_id == self.host.pk
        return True


class _Snapshot:
    """What the rules of one trigger need from the database about a batch of subjects."""

    def __init__(self, rules, subjects, remember=False):
        keys = tuple(sorted(r.key for r in rules))
        engine_ids = frozenset(s.engine.pk for s in subjects if s.engine is not None)
        host_ids = frozenset(s.host.pk for s in subjects if s.host is not None)
        names = frozenset(s.name for s in subjects)
        now = time.monotonic()
        cached = _config.get((keys, engine_ids, host_ids)) if remember else None
        if cached is not None and now - cached[0] < CONFIG_TTL_S:
            self.rows, self.overrides = cached[1], cached[2]
        else:
            self.rows, self.overrides = _rule_rows(keys, engine_ids, host_ids)
            if remember:
                _config[(keys, engine_ids, host_ids)] = (now, self.rows, self.overrides)
        if remember:
            self.states = _remembered_states(keys, names, now)
        else:
            self.states = {(s.rule, s.subject): s for s in RuleState.objects.filter(rule__in=keys, subject__in=names)}
        self.dirty, self.remember = {}, remember
        # Every open event of these rules (not only these subjects': a finding may name another subject).
        self.open = _open_events(keys, remember, now)

    def state(self, rule_key, subject):
        key = (rule_key, subject)
        if key not in self.states:
            self.states[key] = RuleState(rule=rule_key, subject=subject)
        return self.states[key]

    def observed(self, rule_key, subject, event):
        """Keep the open events current within the batch, as separate evaluations would read them."""
        if event is not None and event.is_open:
            self.open[(rule_key, subject)] = event
        else:
            self.open.pop((rule_key, subject), None)

    def save_states(self):
        """The rule memories that changed, new or not, in one upsert (remembering: see STATES_SAVE_S)."""
        dirty = self.dirty
        if self.remember:
            pending = _unsaved["pairs"]
            pending.update(dirty)
            now = time.monotonic()
            if not pending or (now - _unsaved["saved_at"] < STATES_SAVE_S and all(p in _stored for p in dirty)):
                return
            dirty, _unsaved["pairs"], _unsaved["saved_at"] = dict(pending), {}, now
        if not dirty:
            return
        rows = [RuleState(rule=rule, subject=subject, data=row.data) for (rule, subject), row in dirty.items()]
        try:
            RuleState.objects.bulk_create(rows, update_conflicts=True, unique_fields=["rule", "subject"],
                                          update_fields=["data", "updated_at"])
        except Exception:
            log.exception("alert rule memories of %s not saved", sorted(dirty))
        else:
            if self.remember:
                _stored.update(dirty)


def _remembered_states(keys, names, now):
    """{(rule, subject): RuleState} for every pair, read only where not remembered (or too long ago)."""
    pairs = [(key, name) for key in keys for name in names]
    stale = [pair for pair in pairs if pair not in _memories or now - _memories[pair][0] >= STATES_TTL_S]
    if stale:
        rows = {(s.rule, s.subject): s for s in RuleState.objects.filter(rule__in={k for k, _ in stale},
                                                                           subject__in={n for _, n in stale})}
        for rule, subject in stale:
            if (rule, subject) in _unsaved["pairs"]:  # this process's memory is newer than the row
                _memories[(rule, subject)] = (now, _unsaved["pairs"][(rule, subject)])
                continue
            row = rows.get((rule, subject))
            if row is not None:
                _stored.add((rule, subject))
            _memories[(rule, subject)] = (now, row or RuleState(rule=rule, subject=subject))
    return {pair: _memories[pair][1] for pair in pairs}


def _rule_rows(keys, engine_ids, host_ids):
    """({key: AlertRule}, {(key, "engine"|"host", id): AlertRuleOverride}) for these subjects."""
    mine = Q()  # the overrides of these subjects
    if engine_ids:
        mine |= Q(engine_id__in=engine_ids)
    if host_ids:
        mine |= Q(host_id__in=host_ids)
    rows = AlertRule.objects.filter(key__in=keys)
    if engine_ids or host_ids:
        rows = rows.annotate(has_override=Exists(AlertRuleOverride.objects.filter(mine, rule=OuterRef("pk"))))
    rows = {r.key: r for r in rows}
    overrides = {}
    overridden = {r.pk: r.key for r in rows.values() if getattr(r, "has_override", False)}
    if overridden:  # seldom: most rules have no per-engine or per-host override
        for o in AlertRuleOverride.objects.filter(mine, rule_id__in=overridden):
            if o.engine_id is not None:
                overrides[(overridden[o.rule_id], "engine", o.engine_id)] = o
            if o.host_id is not None:
                overrides[(overridden[o.rule_id], "host", o.host_id)] = o
    return rows, overrides


def evaluate_many(signal, subjects, *, remember=False):
    """Evaluate every rule of SIGNAL for each of SUBJECTS, e.g. [{"engine": engine, "reading": {...}}, ...]
    (or host=...; the other keys are the rules' context), with the same queries for one subject as for
    many; one rule's bug never stops the others. Returns the events the findings touched.
    REMEMBER: a caller that evaluates these subjects again and again, and alone (a resident
    poller's tick): keep the rule rows and memories between calls (see CONFIG_TTL_S)."""
    rules = rules_for(signal)
    if not rules or not subjects:
        return []
    subjects = [_Subject(s) for s in subjects]
    snap = _Snapshot(rules, subjects, remember=remember)
    events = []
    for subject in subjects:
        for rule in rules:
            try:
                events.extend(_evaluate_rule(rule, snap, subject))
            except Exception:
                log.exception("alert rule %s failed", rule.key)
    snap.save_states()
    return events


def evaluate(signal, *, engine=None, host=None, remember=False, **context):
    """Evaluate every rule of SIGNAL for one subject; one rule's bug never stops the others."""
    return evaluate_many(signal, [{"engine": engine, "host": host, **context}], remember=remember)


def _evaluate_rule(rule, snap, subject):
    settings = rule_settings(rule, engine=subject.engine, host=subject.host, row=snap.rows.get(rule.key, False),
                             override=snap.overrides.get(subject.override_key(rule.key), False))
    if not settings.enabled:  # nothing open under this rule (the usual case): no query at all
        return _resolve_all(rule, snap, subject)
    state_row = snap.state(rule.key, subject.name)
    before = _deep_copy(state_row.data)
    findings = rule.evaluate(settings=settings, engine=subject.engine, host=subject.host, state=state_row.data,
                             **subject.context)
    if state_row.data != before:
        snap.dirty[(rule.key, subject.name)] = state_row
    for_s = float(settings.params.get("for_s", 0))
    events = []
    for finding in findings:
        event = snap.open.get((rule.key, finding.subject))
        if event is None and not finding.active:
            continue
        if event is not None and finding.active and _observing_changes_nothing(event, finding, for_s):
            events.append(event)
            continue
        event = alert_observe(rule=rule.key, finding=finding, severity=settings.severity, for_s=for_s)
        snap.observed(rule.key, finding.subject, event)
        events.append(event)
    return events


def _deep_copy(data):
    """A rule memory is JSON (lists of samples): marshal copies it ~10x faster than repr() prints it."""
    try:
        return marshal.loads(marshal.dumps(data))
    except ValueError:
        return copy.deepcopy(data)


def _observing_changes_nothing(event, finding, for_s):
    """Whether alert_observe would leave this open EVENT as it is (it would only lock and read it again):
    nothing new to say and, while pending, not yet due to fire. Mirrors lifecycle._refresh and its firing test."""
    if ((finding.cause and finding.cause != event.cause) or (finding.message and finding.message != event.message)
            or finding.details != event.details):
        return False
    if event.state == AlertEvent.State.FIRING:
        return True
    wait = finding.for_s if finding.for_s is not None else for_s
    return (event.state == AlertEvent.State.PENDING and not finding.fire_now
            and (timezone.now() - event.started_at).total_seconds() < wait)


def _resolve_all(rule, snap, subject):
    """A rule switched off closes its open events for this subject."""
    events = []
    for event in [e for (key, _), e in snap.open.items() if key == rule.key and subject.owns(e)]:
        resolved = alert_observe(rule=rule.key, finding=Finding(subject=event.subject, active=False), severity=event.severity)
        snap.observed(rule.key, event.subject, resolved)
        events.append(resolved)
    return events


def evaluate_beat():
    return evaluate("beat")
