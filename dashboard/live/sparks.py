"""The overview's 15-minute sparklines (drawn as inline SVG by live.js, extended by events)."""
from datetime import timedelta

from django.utils import timezone

from dashboard.models import Engine, Host

from .chartdata import _series_points, gpu_indexes

SPARK_WINDOW = timedelta(minutes=15)
SPARK_POINTS = 300


def _spark(subject, obj, kind, metric, start, end):
    data = _series_points(metric=metric, **{kind: obj}, start=start, end=end, max_points=SPARK_POINTS)
    return f"{subject}|{metric}", {"t": data["t"], "y": data["y"]}


def overview_sparks(*, now=None):
    end = now or timezone.now()
    start = end - SPARK_WINDOW
    out = {}
    for engine in Engine.objects.all():
        key, val = _spark(f"engine.{engine.id}", engine, "engine", "generation_tokens_per_s", start, end)
        out[key] = val
    for host in Host.objects.all():
        metrics = ["psi.memory.some.avg10"] + [f"gpu{i}.sm_clock_mhz" for i in gpu_indexes(host)]
        for metric in metrics:
            key, val = _spark(f"host.{host.id}", host, "host", metric, start, end)
            out[key] = val
    return out
