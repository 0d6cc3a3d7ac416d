"""Effective rule settings: class defaults ← AlertRule row ← per-engine/host override."""

from dataclasses import dataclass

from . import conf
from .models import AlertRule, AlertRuleOverride


@dataclass
class RuleSettings:
    enabled: bool
    severity: str
    params: dict

    def __getitem__(self, name):
        return self.params[name]


def rule_row(key):
    """The stored row of rule KEY, created (with the rule's default enablement) when missing."""
    from .rules import REGISTRY

    rule = REGISTRY.get(key)
    row, _ = AlertRule.objects.get_or_create(key=key, defaults={"enabled": getattr(rule, "enabled_by_default", True)})
    return row


def rule_settings(rule, *, engine=None, host=None, row=None, override=None):
    """RULE is a rule class or instance (dashboard.alerts.rules); returns what applies to this subject.
    ROW / OVERRIDE may be passed in when already loaded (False: known to be absent)."""
    if row is None:
        row = AlertRule.objects.filter(key=rule.key).first()
    params = dict(rule.DEFAULTS)
    enabled, severity = getattr(rule, "enabled_by_default", True), rule.severity
    if row:
        params.update(row.params or {})
        enabled, severity = row.enabled, row.severity or rule.severity
    if override is None:
        override = _override(row, engine, host)
    if override:
        params.update(override.params or {})
        if override.enabled is not None:
            enabled = override.enabled
    return RuleSettings(enabled=enabled, severity=severity, params=params)


def _override(row, engine, host):
    if not row or (engine is None and host is None):
        return None
    qs = AlertRuleOverride.objects.filter(rule=row)
    return qs.filter(engine=engine).first() if engine is not None else qs.filter(host=host).first()


def renotify_interval_s():
    """A function rule key → seconds between re-notifications (the rule's row, else the default), rows read once."""
    rows = dict(AlertRule.objects.exclude(renotify_s=None).values_list("key", "renotify_s"))
    default = conf.renotify_s()
    return lambda key: rows.get(key) or default
