"""The overview's 15-minute sparklines (drawn as inline SVG by live.js, extended by events)."""

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TypedDict

from django.utils import timezone

from dashboard.models import Engine, Host

from .chartdata import fetch_points, gpu_indexes
from .ranges import TimeRange

SPARK_WINDOW = timedelta(minutes=15)
SPARK_POINTS = 300


class Spark(TypedDict):
    t: list[str]
    y: list[float | None]


def _sparks(subject: str, obj: Engine | Host, metrics: Sequence[str], rng: TimeRange) -> dict[str, Spark]:
    data = fetch_points(obj, metrics, rng, max_points=SPARK_POINTS)
    return {f"{subject}|{m}": {"t": data[m]["t"], "y": data[m]["y"]} for m in metrics}


def overview_sparks(*, now: datetime | None = None) -> dict[str, Spark]:
    """{"<subject>|<metric>": {"t": [...], "y": [...]}} for every card's sparkline."""
    end = now or timezone.now()
    rng = TimeRange(end - SPARK_WINDOW, end, "15m")
    out: dict[str, Spark] = {}
    for engine in Engine.objects.filter(retired_at__isnull=True):
        out.update(_sparks(f"engine.{engine.id}", engine, ["generation_tokens_per_s"], rng))
    for host in Host.objects.all():
        metrics = ["psi.memory.some.avg10"] + [f"gpu{i}.sm_clock_mhz" for i in gpu_indexes(host)]
        out.update(_sparks(f"host.{host.id}", host, metrics, rng))
    return out
