"""Run the rules of one trigger and feed their findings to the lifecycle.

This runs on every liveness probe (each second per engine) and every poll, so the rule
rows, overrides, rule memories and open events of the subject are read in one query each,
and an inactive finding with nothing open costs nothing more."""
import logging

from .config import rule_settings
from .lifecycle import Finding, alert_observe
from .models import AlertEvent, AlertRule, AlertRuleOverride, RuleState
from .rules import rules_for

log = logging.getLogger(__name__)


class _Snapshot:
    """What the rules of one trigger need from the database about one subject."""

    def __init__(self, rules, engine, host):
        keys = [r.key for r in rules]
        self.rows = {r.key: r for r in AlertRule.objects.filter(key__in=keys)}
        overrides = AlertRuleOverride.objects.filter(rule__key__in=keys).select_related("rule")
        overrides = overrides.filter(engine=engine) if engine is not None else overrides.filter(host=host) if host is not None else overrides.none()
        self.overrides = {o.rule.key: o for o in overrides}
        self.subject = engine.name if engine is not None else host.name if host is not None else "*"
        self.states = {s.rule: s for s in RuleState.objects.filter(rule__in=keys, subject=self.subject)}
        self.open = set(AlertEvent.objects.filter(rule__in=keys, state__in=AlertEvent.OPEN_STATES).order_by()
                        .values_list("rule", "subject"))


def evaluate(signal, *, engine=None, host=None, **context):
    """Evaluate every rule of SIGNAL for one subject; one rule's bug never stops the others."""
    rules = rules_for(signal)
    if not rules:
        return []
    snap = _Snapshot(rules, engine, host)
    events = []
    for rule in rules:
        try:
            events.extend(_evaluate_rule(rule, snap, engine=engine, host=host, **context))
        except Exception:
            log.exception("alert rule %s failed", rule.key)
    return events


def _evaluate_rule(rule, snap, *, engine, host, **context):
    settings = rule_settings(rule, engine=engine, host=host, row=snap.rows.get(rule.key, False),
                             override=snap.overrides.get(rule.key, False))
    if not settings.enabled:  # nothing open under this rule (the usual case): no query at all
        return _resolve_all(rule, engine=engine, host=host) if any(r == rule.key for r, _ in snap.open) else []
    state_row = snap.states.get(rule.key) or RuleState(rule=rule.key, subject=snap.subject)
    before = repr(state_row.data)
    findings = rule.evaluate(settings=settings, engine=engine, host=host, state=state_row.data, **context)
    if repr(state_row.data) != before:
        state_row.save()
    for_s = float(settings.params.get("for_s", 0))
    return [alert_observe(rule=rule.key, finding=f, severity=settings.severity, for_s=for_s)
            for f in findings if f.active or (rule.key, f.subject) in snap.open]


def _resolve_all(rule, *, engine, host):
    """A rule switched off closes its open events for this subject."""
    qs = AlertEvent.objects.filter(rule=rule.key, state__in=AlertEvent.OPEN_STATES)
    qs = qs.filter(engine=engine) if engine is not None else qs.filter(host=host) if host is not None else qs
    return [alert_observe(rule=rule.key, finding=Finding(subject=e.subject, active=False), severity=e.severity)
            for e in qs]


def evaluate_beat():
    return evaluate("beat")
