"""Run the rules of one trigger and feed their findings to the lifecycle."""
import logging

from .config import rule_settings
from .lifecycle import alert_observe
from .rules import rules_for

log = logging.getLogger(__name__)


def evaluate(signal, *, engine=None, host=None, **context):
    """Evaluate every enabled rule of SIGNAL; one rule's bug never stops the others."""
    events = []
    for rule in rules_for(signal):
        settings = rule_settings(rule, engine=engine, host=host)
        try:
            findings = rule.evaluate(settings=settings, engine=engine, host=host, **context) if settings.enabled else []
            for finding in findings:
                events.append(alert_observe(rule=rule.key, finding=finding, severity=settings.severity,
                                            for_s=float(settings.params.get("for_s", 0))))
        except Exception:
            log.exception("alert rule %s failed", rule.key)
    return events


def evaluate_beat():
    return evaluate("beat")
