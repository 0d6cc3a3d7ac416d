"""The rule interface: a rule looks at one reading and returns findings for the subjects it covers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from dashboard.bounds import Bounds

if TYPE_CHECKING:
    from ..finding import Finding


class Rule:
    key = ""
    title = ""
    severity = "warning"
    # What triggers evaluation: "engine_liveness", "engine_polled", "host_polled", "beat" or "external".
    signal = ""
    # Editable thresholds and durations (seconds); for_s is how long the condition must hold (pending).
    DEFAULTS: ClassVar[dict[str, Any]] = {"for_s": 0}
    help = ""
    # False: the rule is off until someone turns it on (an AlertRule row with enabled=True).
    enabled_by_default = True

    def evaluate(self, *_: Any, **context: Any) -> list[Finding]:
        """Return a list of sparkops.alerts.finding.Finding (active or not) for this rule.

        Called with keywords only: `settings`, `state`, `engine`, `host` and the context of the
        rule's signal (`reading`; `up`, `reason`… for a probe). Each rule names the ones it reads,
        required, and takes the rest as `**_`: this base accepts any arguments (a type checker
        reads `*Any, **Any` as "any signature"), so no rule's narrower signature contradicts it."""
        raise NotImplementedError


# Bounds of the editable settings, by what the name says it is: a value that would make its rule
# meaningless (0 failures) is refused.
MAX_SPAN_S = 30 * 86400
MAX_COUNT = 1_000_000


def param_bounds(name: str) -> Bounds:
    """The Bounds a rule setting NAME may take: percentages (…_pct, drop_points) 0–100,
    durations (…_s) up to 30 days (for_s may be 0: fire at once; other spans at least 1 s),
    sizes in MiB up to 1 TiB, and counts (failures, count, min_queries, intervals) 1–1,000,000."""
    if name.endswith("_pct") or name.endswith("_points"):
        return Bounds(0, 100)
    if name.endswith("_s"):
        return Bounds(0 if name == "for_s" else 1, MAX_SPAN_S)
    if name.endswith("_mib"):
        return Bounds(0, 1024 * 1024)
    return Bounds(1, MAX_COUNT)
