"""The audit of one box's engines: every check over their latest configuration snapshots, with
the thresholds in force, worst finding first."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from django.db.models import OuterRef, Subquery

from .base import Result, Snapshots
from .checks import CHECKS
from .thresholds import effective_thresholds

# "applied": in the unit's files, not yet in what runs (takes effect at the next restart)
ORDER = {"fail": 0, "warn": 1, "applied": 2, "pass": 3}

if TYPE_CHECKING:
    from dashboard.models import Engine, Host


def snapshots_of(engines: Iterable[Engine]) -> Snapshots:
    """[(engine, its latest snapshot's data)] for those of ENGINES that have one: two queries
    for any number of engines."""

    from dashboard.models import ConfigSnapshot, Engine

    engines = list(engines)
    newest = ConfigSnapshot.objects.filter(engine=OuterRef("pk")).order_by("-observed_at", "-id").values("id")[:1]
    ids = dict(
        Engine.objects.filter(pk__in=[e.pk for e in engines]).annotate(snap=Subquery(newest)).values_list("pk", "snap")
    )
    snaps = ConfigSnapshot.objects.in_bulk([i for i in ids.values() if i is not None])
    return [(e, snaps[ids[e.pk]].data) for e in engines if ids.get(e.pk) in snaps]


def concerns(result: Result, engine: Engine) -> bool:
    """Whether RESULT is about ENGINE: its own, a pair it is in, or the box's."""
    return result.subject in (engine.name, "box") or engine.name in result.subject.split(" + ")


def audit(
    engines: Iterable[Engine],
    *,
    overrides: Mapping[str, Any] | None = None,
    only_engine: Engine | None = None,
) -> list[Result]:
    """Every check over ENGINES (one box's), worst first, with the box's stored thresholds and
    OVERRIDES (one run's) over them. ONLY_ENGINE: that engine's results (box-wide checks: those
    naming it)."""
    engines = list(engines)
    snaps = snapshots_of(engines)
    in_force = effective_thresholds(getattr(engines[0], "host_id", None) if engines else None, overrides)
    results = []
    for key, check in CHECKS.items():
        results += check.run(snaps, settings=in_force[key])
    if only_engine is not None:
        results = [r for r in results if concerns(r, only_engine)]
    return sorted(results, key=lambda r: (ORDER[r.status], r.subject, r.check))


def audit_host(host: Host, *, overrides: Mapping[str, Any] | None = None) -> list[Result]:
    from dashboard.models import Engine

    engines = list(Engine.objects.filter(host=host, retired_at__isnull=True).order_by("name"))
    return audit(engines, overrides=overrides)
