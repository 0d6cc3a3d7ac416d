"""What Explore reads: the catalogue of stored series and one chart's JSON.

A view is `metric` (one or more stored metric names), the subjects (`engine=NAME`, `host=NAME`,
each repeatable) and a range (`range=<preset>` or `start`/`end`, sparkops/live/ranges.py). One
trace per subject and metric that has a series; the overlays are those of the live pages
(sparkops/live/chartdata.py): change-log entries concerning any subject, and their alert periods."""

from dataclasses import dataclass

from django.http import QueryDict

from dashboard.models import Engine, Host, Series
from sparkops.live.chartdata import ENGINE_PANELS, GPU_PANELS, HOST_PANELS, UNITS, alert_periods, annotations, trace
from sparkops.live.chartdata import fetch_points as _fetch_points
from sparkops.live.ranges import TimeRange, parse_range

MAX_METRICS = 4
MAX_SUBJECTS = 8
DEFAULT_RANGE = "6h"


class ExploreError(ValueError):
    """A view that cannot be drawn; the message says why."""


@dataclass(frozen=True)
class MetricInfo:
    label: str
    unit: str
    scale: float
    tickformat: str


def _known() -> dict[str, MetricInfo]:
    """The labels, units and scales the live pages give their metrics (GPU metrics without "gpuN.")."""
    out = {}
    for specs in (ENGINE_PANELS, HOST_PANELS, GPU_PANELS):
        for pid, title, fmt, scale, traces in specs:
            for metric, name in traces:
                label = title if len(traces) == 1 else f"{title.split(' (')[0]}: {name}"
                out[metric] = MetricInfo(label, UNITS.get(pid, ""), scale, fmt)
    return out


KNOWN = _known()


def metric_info(metric: str) -> MetricInfo:
    head, _, rest = metric.partition(".")
    if head.startswith("gpu") and head[3:].isdigit() and rest in KNOWN:
        info = KNOWN[rest]
        return MetricInfo(f"GPU {head[3:]} · {info.label}", info.unit, info.scale, info.tickformat)
    return KNOWN.get(metric, MetricInfo(metric, "", 1, ""))


@dataclass(frozen=True)
class View:
    metrics: list[str]
    engines: list[Engine]
    hosts: list[Host]
    rng: TimeRange

    @property
    def subjects(self) -> list[Engine | Host]:
        return [*self.engines, *self.hosts]


def explore_catalogue() -> dict[str, dict[str, list[str]]]:
    """{"engine": {metric: [engine names]}, "host": {metric: [host names]}} of every stored series
    (retired engines' too: their history is kept), in one query."""
    out: dict[str, dict[str, list[str]]] = {"engine": {}, "host": {}}
    rows = Series.objects.values_list("metric", "engine__name", "host__name").order_by(
        "metric", "engine__name", "host__name"
    )
    for metric, engine, host in rows:
        kind, name = ("engine", engine) if engine else ("host", host)
        out[kind].setdefault(metric, []).append(name)
    return out


def view_parse(params: QueryDict) -> View:
    """The view a query string asks for; ExploreError names what is wrong (unknown metric or
    subject, too many, a bad range)."""
    metrics = list(dict.fromkeys(m.strip() for m in params.getlist("metric") if m.strip()))
    engines = _subjects(Engine, params.getlist("engine"), "engine")
    hosts = _subjects(Host, params.getlist("host"), "box")
    if not metrics:
        raise ExploreError("Pick a metric: ?metric=NAME (the page lists every stored one).")
    if len(metrics) > MAX_METRICS or len(engines) + len(hosts) > MAX_SUBJECTS:
        raise ExploreError(f"At most {MAX_METRICS} metrics and {MAX_SUBJECTS} engines and boxes on one chart.")
    if not engines and not hosts:
        raise ExploreError("Pick at least one engine or box: ?engine=NAME or ?host=NAME.")
    stored = set(Series.objects.filter(metric__in=metrics).values_list("metric", flat=True))
    unknown = [m for m in metrics if m not in stored]
    if unknown:
        raise ExploreError(f"No stored series is called {', '.join(map(repr, unknown))}.")
    try:
        rng = parse_range(params, default=DEFAULT_RANGE)
    except ValueError as exc:
        raise ExploreError(str(exc)) from None
    return View(metrics, engines, hosts, rng)


def _subjects(model, names: list[str], word: str) -> list:
    names = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    found = {obj.name: obj for obj in model.objects.filter(name__in=names)}
    missing = [n for n in names if n not in found]
    if missing:
        raise ExploreError(f"No {word} is called {', '.join(map(repr, missing))}.")
    return [found[n] for n in names]


def explore_chart(*, view: View) -> dict:
    """The chart's JSON: {"range", "metrics", "unit", "tickformat", "traces", "annotations", "alerts"}."""
    infos = {m: metric_info(m) for m in view.metrics}
    traces = []
    for obj in view.subjects:
        kind = "engine" if isinstance(obj, Engine) else "host"
        data = _fetch_points(obj, view.metrics, view.rng)
        for metric in view.metrics:
            if data[metric]["t"]:
                name = obj.name if len(view.metrics) == 1 else f"{obj.name} · {infos[metric].label}"
                traces.append(trace(f"{kind}.{obj.pk}", data[metric], metric, name, infos[metric].scale))
    units = {i.unit for i in infos.values()}
    formats = {i.tickformat for i in infos.values()}
    return {
        "range": view.rng.as_dict(),
        "title": " · ".join(i.label for i in infos.values()),
        "unit": units.pop() if len(units) == 1 else "",
        "tickformat": formats.pop() if len(formats) == 1 else "",
        "traces": traces,
        "annotations": _annotations(view),
        "alerts": _alerts(view),
    }


def _annotations(view: View) -> list[dict]:
    seen: dict[int, dict] = {}
    for obj in view.subjects:
        found = (
            annotations(rng=view.rng, engine=obj) if isinstance(obj, Engine) else annotations(rng=view.rng, host=obj)
        )
        for a in found:
            seen.setdefault(a["id"], a)
    return sorted(seen.values(), key=lambda a: (a["time"], a["id"]))


def _alerts(view: View) -> list[dict]:
    out = []
    for obj in view.subjects:
        periods = (
            alert_periods(rng=view.rng, engine=obj)
            if isinstance(obj, Engine)
            else alert_periods(rng=view.rng, host=obj)
        )
        out += [{**a, "subject": obj.name} for a in periods]
    return sorted(out, key=lambda a: a["start"])
