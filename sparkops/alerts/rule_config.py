"""Effective rule settings: class defaults ← AlertRule row ← per-engine/host override."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from dashboard.models import Engine, Host

from . import conf
from .models import AlertRule, AlertRuleOverride


class RuleLike(Protocol):
    """What the settings read of a rule: a class of sparkops.alerts.rules, an instance, or an operator's own."""

    @property
    def key(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def DEFAULTS(self) -> dict[str, Any]: ...


@dataclass
class RuleSettings:
    enabled: bool
    severity: str
    params: dict[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.params[name]


def rule_settings(
    rule: RuleLike,
    *,
    engine: Engine | None = None,
    host: Host | None = None,
    row: AlertRule | Literal[False] | None = None,
    override: AlertRuleOverride | Literal[False] | None = None,
) -> RuleSettings:
    """RULE is a rule class or instance (sparkops.alerts.rules); returns what applies to this subject.
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


def _override(
    row: AlertRule | Literal[False] | None, engine: Engine | None, host: Host | None
) -> AlertRuleOverride | None:
    if not row or (engine is None and host is None):
        return None
    qs = AlertRuleOverride.objects.filter(rule=row)
    return qs.filter(engine=engine).first() if engine is not None else qs.filter(host=host).first()


def renotify_interval_s() -> Callable[[str], float]:
    """A function rule key → seconds between re-notifications (the rule's row, else the default), rows read once."""
    rows = dict(AlertRule.objects.exclude(renotify_s=None).values_list("key", "renotify_s"))
    default = conf.renotify_s()
    return lambda key: rows.get(key) or default
