"""Run the rules of one trigger and feed their findings to the lifecycle."""
import logging

from .config import rule_settings
from .lifecycle import Finding, alert_observe
from .models import AlertEvent, RuleState
from .rules import rules_for

log = logging.getLogger(__name__)


def evaluate(signal, *, engine=None, host=None, **context):
    """Evaluate every rule of SIGNAL for one subject; one rule's bug never stops the others."""
    events = []
    for rule in rules_for(signal):
        try:
            events.extend(_evaluate_rule(rule, engine=engine, host=host, **context))
        except Exception:
            log.exception("alert rule %s failed", rule.key)
    return events


def _evaluate_rule(rule, *, engine, host, **context):
    settings = rule_settings(rule, engine=engine, host=host)
    if not settings.enabled:
        return _resolve_all(rule, engine=engine, host=host)
    key = engine.name if engine is not None else host.name if host is not None else "*"
    state_row, _ = RuleState.objects.get_or_create(rule=rule.key, subject=key)
    before = repr(state_row.data)
    findings = rule.evaluate(settings=settings, engine=engine, host=host, state=state_row.data, **context)
    if repr(state_row.data) != before:
        state_row.save(update_fields=["data", "updated_at"])
    return [alert_observe(rule=rule.key, finding=f, severity=settings.severity,
                          for_s=float(settings.params.get("for_s", 0))) for f in findings]


def _resolve_all(rule, *, engine, host):
    """A rule switched off closes its open events for this subject."""
    qs = AlertEvent.objects.filter(rule=rule.key, state__in=AlertEvent.OPEN_STATES)
    qs = qs.filter(engine=engine) if engine is not None else qs.filter(host=host) if host is not None else qs
    return [alert_observe(rule=rule.key, finding=Finding(subject=e.subject, active=False), severity=e.severity)
            for e in qs]


def evaluate_beat():
    return evaluate("beat")
