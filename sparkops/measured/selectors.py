"""Read side shared by benchmark and probe pages."""

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from dashboard.models import Engine

    from .models import MeasuredRun


class OfAnEngine(Protocol):
    """A profile of either kind: each names its engine."""

    @property
    def engine(self) -> "Engine": ...


def trend_annotations(profile: OfAnEngine, runs: Sequence["MeasuredRun"]) -> list[dict[str, Any]]:
    """The change-log marks of PROFILE's engine over RUNS (oldest first), a day either side; for
    the benchmark and probe trends."""
    if not runs:
        return []
    from sparkops.changelog.selectors import chart_annotations

    start = runs[0].created_at - timedelta(days=1)
    end = runs[-1].created_at + timedelta(days=1)
    return chart_annotations(engine=profile.engine, start=start, end=end)
