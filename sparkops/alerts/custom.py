"""Rules of the operator's own (issue 51): a threshold on one stored series, evaluated with the
built-in rules of the same trigger, so they share the lifecycle (pending for `for_s` → firing →
resolved), silences, maintenance windows, re-notification and the outbox.

A `CustomRule` row becomes a `ThresholdRule`, a `rules.base.Rule` whose key is "custom.<name>":
an engine rule runs on each metrics tick ("engine_polled"), a host rule on each host reading
("host_polled"). It reads the same number the sample store keeps for that series, from the
reading the tick stored. Its channels are the routes of its key (`Route.rule`)."""

from __future__ import annotations

import logging
import math
import operator
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol, TypeVar

from django.db import DatabaseError

from dashboard.models import Engine, Host, Series
from sparkops.collectors.derive import SAMPLE_METRICS
from sparkops.collectors.host import psi_stall_rates

# The host's numbers as the sample store gets them: reused, so a rule reads exactly what is stored.
from sparkops.collectors.hostread import _values as host_values

from .custom_model import CustomRule
from .finding import Finding
from .rules.base import Rule

log = logging.getLogger(__name__)

T = TypeVar("T")


class RulesMemory(Protocol):
    """What `custom_rules` keeps in an evaluation's memory (a resident poller's evaluate.Memory or
    held.HeldMemory): the rules it read per signal, re-read after `config_ttl_s`, read through
    `read_config` (which answers KEPT while the database is away)."""

    config_ttl_s: float
    custom_rules: dict[str, tuple[float, list[Rule]]]

    def read_config(self, read: Callable[[], T], kept: Callable[[], T | None]) -> T | None: ...


COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}
SIGNALS = {CustomRule.Scope.ENGINE: "engine_polled", CustomRule.Scope.HOST: "host_polled"}

# The series each scope stores (sparkops/poller/reading.py, sparkops/collectors/hostread.py);
# any other metric a Series row holds is accepted too.
ENGINE_METRICS = (*SAMPLE_METRICS, "up")
HOST_METRICS = ("mem_available_bytes", "mem_used_bytes", "swap_used_bytes", "compilers", "compilers_rss_bytes")
HOST_PATTERNS = (
    re.compile(r"psi\.(cpu|memory|io|irq)\.(some|full)\.(avg10|avg60|stall_pct)"),
    re.compile(r"gpu\d+\.(sm_clock_mhz|sm_clock_max_mhz|utilization_pct|power_w|temperature_c)"),
)


def metric_known(*, scope: str, metric: str) -> bool:
    """Whether SCOPE ("engine" or "host") stores a series named METRIC."""
    if scope == CustomRule.Scope.ENGINE:
        static = metric in ENGINE_METRICS
        stored = Series.objects.filter(metric=metric, engine__isnull=False)
    else:
        static = metric in HOST_METRICS or any(p.fullmatch(metric) for p in HOST_PATTERNS)
        stored = Series.objects.filter(metric=metric, host__isnull=False)
    return static or stored.exists()


def metric_examples(scope: str) -> str:
    """The metrics named in a refusal, so the person sees what exists."""
    if scope == CustomRule.Scope.ENGINE:
        return ", ".join(ENGINE_METRICS)
    return ", ".join((*HOST_METRICS, "psi.memory.some.avg10", "psi.cpu.some.stall_pct", "gpu0.temperature_c"))


class ThresholdRule(Rule):
    """One CustomRule as a rule: active while its series' newest value compares true."""

    DEFAULTS: ClassVar[dict] = {"for_s": 0}  # each instance's own is set in __init__

    def __init__(self, row: CustomRule) -> None:
        self.row = row
        self.key = row.key
        self.title = f"{row.metric} {row.comparator} {row.threshold:g}"
        self.severity = row.severity
        self.signal = SIGNALS[CustomRule.Scope(row.scope)]
        self.enabled_by_default = row.enabled
        self.__dict__["DEFAULTS"] = {"for_s": row.for_s}  # per rule, not the class's
        where = row.engine or row.host or f"every {row.scope}"
        self.help = (
            f"Custom rule: {row.metric} of {where} {row.get_comparator_display()} {row.threshold:g}"
            f" for {row.for_s} s → {row.severity}."
        )

    def evaluate(
        self,
        *,
        state: dict[str, Any],
        reading: Mapping[str, Any],
        engine: Engine | None = None,
        host: Host | None = None,
        **_: Any,
    ) -> list[Finding]:
        row, subject = self.row, engine if engine is not None else host
        if subject is None or (row.engine_id or row.host_id) not in (None, subject.pk):
            return []
        value = self.value(reading, state, engine=engine)
        if value is None:  # not measured this tick: nothing to say either way
            return []
        active = COMPARE[row.comparator](value, row.threshold)
        message = (
            f"{subject.name} {row.metric} is {value:.4g} ({row.comparator} {row.threshold:g}"
            f"{' for ' + str(row.for_s) + ' s' if row.for_s else ''}): custom rule {row.name}."
        )
        details = {"metric": row.metric, "comparator": row.comparator, "threshold": row.threshold}
        return [
            Finding(
                subject=subject.name,
                engine=engine,
                host=host,
                active=active,
                cause="custom_rule",  # docs/alerts.md#custom_rule: what a rule of your own is
                message=message,
                details=details,
                resolution=f"{row.metric} back at {value:.4g}",
            )
        ]

    def value(self, reading: Mapping[str, Any], state: dict[str, Any], *, engine: Engine | None = None) -> float | None:
        """The number the sample store keeps for this series from READING (None: not measured)."""
        metric = self.row.metric
        if engine is not None:
            raw = (1.0 if reading.get("up") else 0.0) if metric == "up" else reading.get(metric)
        else:
            raw = self._host_value(reading, state)
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
            return None
        return float(raw)

    def _host_value(self, reading: Mapping[str, Any], state: dict[str, Any]) -> object:
        metric = self.row.metric
        if metric.endswith(".stall_pct"):  # a rate across readings: the rule keeps the previous totals
            rates, state["psi"] = psi_stall_rates(
                (reading.get("host") or {}).get("psi"), state.get("psi") or {}, time.time()
            )
            return rates.get(metric)
        return host_values(reading.get("host") or {}, reading.get("gpus") or [], reading.get("processes") or {}).get(
            metric
        )


def custom_rules(signal: str, *, memory: RulesMemory | None = None) -> list[Rule]:
    """The operator's rules of SIGNAL, as rules. With a MEMORY (a resident poller's) the rows are
    read again only after its `config_ttl_s`, as the built-in rules' rows are: a rule added on the
    web applies to the pollers within that; without one, read now (one query)."""
    if signal not in SIGNALS.values():
        return []
    now = time.monotonic()
    cache: dict[str, tuple[float, list[Rule]]] | None = getattr(memory, "custom_rules", None)
    if cache is not None and signal in cache and now - cache[signal][0] < memory.config_ttl_s:  # type: ignore[union-attr]
        return cache[signal][1]
    scope = next(s for s, sig in SIGNALS.items() if sig == signal)

    def read() -> list[Rule]:
        return [ThresholdRule(row) for row in CustomRule.objects.filter(scope=scope).select_related("engine", "host")]

    try:
        # A poller's memory checks the database before the read (alerts/held.py): None while it is away.
        rules = read() if memory is None else memory.read_config(read, lambda: None)
    except DatabaseError:
        if memory is None:
            raise
        rules = None
    if rules is None:
        # A poller's tick goes on without the database (alerts/held.py): with what it read last,
        # else the built-in rules alone; it asks again next tick.
        log.warning("custom alert rules not read (the database did not answer): %s kept", signal)
        return cache[signal][1] if cache is not None and signal in cache else []
    if cache is not None:
        cache[signal] = (now, rules)
    return rules
