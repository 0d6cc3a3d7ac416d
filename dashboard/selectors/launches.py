"""The guarded launches the engine cards show: how a hand-run engine was started, when
`sparkops launch` started it (controls/launch.py writes the Launch rows; this reads them). A
selector, so that the cards (live/) read it without importing the controls, which sit above the
poller that pushes the cards."""

from collections.abc import Iterable

from dashboard.models import Engine, Launch


def guarded_launches(engines: Iterable[Engine]) -> dict[int, Launch]:
    """{engine id: its latest Launch} for those of ENGINES without a unit (hand-run: the only ones
    whose card says how they were started), in one query."""
    ids = [e.pk for e in engines if not e.unit]
    out: dict[int, Launch] = {}
    if ids:
        for row in Launch.objects.filter(engine_id__in=ids).order_by("engine_id", "-started_at", "-pk"):
            if row.engine_id is not None:  # filtered on it above; for the type checker
                out.setdefault(row.engine_id, row)
    return out
