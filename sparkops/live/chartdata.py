"""Chart JSON for every live page: panels of traces plus the overlays drawn on all of them
(change-log annotations, alert periods, restarts). The browser turns it into Plotly figures
and extends the traces from "engine.sample"/"host.sample" events (subject + metric)."""

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypedDict

from django.db.models import Q

from dashboard.models import Engine, Host, KVPoolEntry, Series
from dashboard.selectors.series import series_points_many
from sparkops.alerts.models import AlertEvent
from sparkops.changelog.selectors import chart_annotations

from .ranges import RangeDict, TimeRange

MAX_POINTS = 2000


class Trace(TypedDict):
    """One line of a panel: a metric's points, scaled, with None where the data has a gap."""

    name: str
    subject: str
    metric: str
    scale: float
    t: list[str]
    y: list[float | None]
    y_min: list[float | None]
    y_max: list[float | None]
    source: str


class Panel(TypedDict):
    id: str
    title: str
    tickformat: str
    unit: str
    traces: list[Trace]


class AlertPeriod(TypedDict):
    start: str
    end: str
    severity: str
    title: str


class Mark(TypedDict):
    time: str
    title: str


class Chart(TypedDict):
    """What a chart page fetches (and the live view extends)."""

    range: RangeDict
    panels: list[Panel]
    annotations: list[dict[str, Any]]  # changelog.selectors.chart_annotations'
    alerts: list[AlertPeriod]
    restarts: list[Mark]
    shaded: list[Any]


# (panel id, title, y-axis format, scale, [(metric, trace name), ...])
PanelSpec = tuple[str, str, str, float, list[tuple[str, str]]]
GIB = 1024**3

# (panel id, title, y-axis format, scale, [(metric, trace name), ...])
# Decode and prompt rates differ by two orders of magnitude: each has its own panel (a shared axis hid decode).
ENGINE_PANELS: list[PanelSpec] = [
    ("tokens", "Decode (tokens/s)", "", 1, [("generation_tokens_per_s", "decode")]),
    ("prompt", "Prompt processing (tokens/s)", "", 1, [("prompt_tokens_per_s", "prompt")]),
    ("requests", "Requests", "", 1, [("requests_running", "running"), ("requests_waiting", "waiting")]),
    ("kv", "KV-cache usage", ".0%", 1, [("kv_cache_usage", "KV usage")]),
    ("prefix", "Prefix-cache hit rate", ".0%", 1, [("prefix_cache_hit_rate", "hit rate")]),
    ("ttft", "Time to first token (ms)", "", 1000, [("ttft_p50_s", "p50"), ("ttft_p95_s", "p95")]),
    ("itl", "Inter-token latency (ms)", "", 1000, [("itl_p50_s", "p50"), ("itl_p95_s", "p95")]),
]
HOST_PANELS: list[PanelSpec] = [
    (
        "psi",
        "Pressure (PSI avg10, %)",
        "",
        1,
        [
            ("psi.memory.some.avg10", "memory some"),
            ("psi.memory.full.avg10", "memory full"),
            ("psi.cpu.some.avg10", "cpu some"),
            ("psi.io.some.avg10", "io some"),
            ("psi.io.full.avg10", "io full"),
        ],
    ),
    (
        "memory",
        "Memory & swap (GiB)",
        "",
        1 / GIB,
        [("mem_used_bytes", "used"), ("mem_available_bytes", "available"), ("swap_used_bytes", "swap used")],
    ),
    ("compilers", "Compiler processes", "", 1, [("compilers", "alive")]),
    ("compilers_rss", "Compiler RSS (GiB)", "", 1 / GIB, [("compilers_rss_bytes", "RSS")]),
]
GPU_PANELS: list[PanelSpec] = [
    ("clock", "SM clock (MHz)", "", 1, [("sm_clock_mhz", "SM clock"), ("sm_clock_max_mhz", "max")]),
    ("power", "Power (W)", "", 1, [("power_w", "power")]),
    ("util", "Utilisation (%)", "", 1, [("utilization_pct", "util")]),
    ("temp", "Temperature (°C)", "", 1, [("temperature_c", "temperature")]),
]
# The y axis's unit of each panel (by id, GPU prefix left off); ratio panels are drawn 0–100 %.
UNITS = {
    "tokens": "tokens/s",
    "prompt": "tokens/s",
    "requests": "requests",
    "kv": "% of the pool",
    "prefix": "% of queries",
    "ttft": "ms",
    "itl": "ms",
    "psi": "% of time stalled",
    "memory": "GiB",
    "compilers": "processes",
    "compilers_rss": "GiB",
    "clock": "MHz",
    "power": "W",
    "util": "%",
    "temp": "°C",
}
# A silence longer than this many sampling steps is a gap in the data (an outage): the line breaks there.
GAP_STEPS = 3
_GPU_METRIC = re.compile(r"^gpu(\d+)\.")


def fetch_points(
    obj: Engine | Host, metrics: Iterable[str], rng: TimeRange, max_points: int = MAX_POINTS
) -> dict[str, Any]:
    """{metric: points} for one subject, in one query."""
    engine, host = (obj, None) if isinstance(obj, Engine) else (None, obj)
    return series_points_many(
        metrics=list(metrics), engine=engine, host=host, start=rng.start, end=rng.end, max_points=max_points
    )


def _iso_seconds(text: object) -> float | None:
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None


def break_gaps(ts: Sequence[str], *columns: Sequence[float | None]) -> tuple[list[str], list[list[float | None]]]:
    """Insert a None into every column where consecutive times lie more than GAP_STEPS typical steps apart,
    so Plotly (connectgaps false) leaves a gap instead of a straight line across an outage."""
    secs = [_iso_seconds(t) for t in ts]
    steps = sorted(b - a for a, b in itertools.pairwise(secs) if a is not None and b is not None and b > a)
    if len(steps) < 2:
        return list(ts), [list(c) for c in columns]
    limit = max(steps[len(steps) // 2] * GAP_STEPS, 1.0)
    out_t: list[str] = []
    out: list[list[float | None]] = [[] for _ in columns]
    for i, t in enumerate(ts):
        cur, prev = secs[i], secs[i - 1] if i else None
        if cur is not None and prev is not None and cur - prev > limit:
            out_t.append(datetime.fromtimestamp((cur + prev) / 2, tz=UTC).isoformat())
            for col in out:
                col.append(None)
        out_t.append(t)
        for col, values in zip(out, columns):
            col.append(values[i] if i < len(values) else None)
    return out_t, out


def trace(subject: str, data: Mapping[str, Any], metric: str, name: str, scale: float) -> Trace:
    def scaled(ys: Iterable[float | None] | None) -> list[float | None]:
        return [None if v is None else v * scale for v in ys or []]

    ys, lo, hi = scaled(data["y"]), scaled(data.get("y_min")), scaled(data.get("y_max"))
    t, (ys, lo_g, hi_g) = break_gaps(data["t"], ys, lo or [None] * len(ys), hi or [None] * len(ys))
    return {
        "name": name,
        "subject": subject,
        "metric": metric,
        "scale": scale,
        "t": t,
        "y": ys,
        "y_min": lo_g if lo else [],
        "y_max": hi_g if hi else [],
        "source": data.get("source", "raw"),
    }


def _panels(
    specs: Sequence[PanelSpec],
    subject: str,
    obj: Engine | Host,
    rng: TimeRange,
    prefix: str = "",
    title_prefix: str = "",
) -> list[Panel]:
    data = fetch_points(obj, {f"{prefix}{m}" for *_, traces in specs for m, _ in traces}, rng)
    return [
        {
            "id": f"{prefix}{pid}",
            "title": f"{title_prefix}{title}",
            "tickformat": fmt,
            "unit": UNITS.get(pid, ""),
            "traces": [trace(subject, data[f"{prefix}{m}"], f"{prefix}{m}", name, scale) for m, name in traces],
        }
        for pid, title, fmt, scale, traces in specs
    ]


def alert_periods(*, rng: TimeRange, engine: Engine | None = None, host: Host | None = None) -> list[AlertPeriod]:
    """Warning and critical alerts over the range (advisories, severity info, never shade a chart)."""
    qs = AlertEvent.objects.exclude(state="pending").exclude(severity="info").filter(started_at__lt=rng.end)
    qs = qs.filter(Q(resolved_at__isnull=True) | Q(resolved_at__gt=rng.start))
    qs = qs.filter(engine=engine) if engine is not None else qs.filter(host=host)
    return [
        {
            "start": max(ev.fired_at or ev.started_at, rng.start).isoformat(),
            "end": (ev.resolved_at or rng.end).isoformat(),
            "severity": ev.severity,
            "title": f"{ev.rule}: {ev.message[:120]}",
        }
        for ev in qs.order_by("started_at")[:500]
    ]


def annotations(*, rng: TimeRange, engine: Engine | None = None, host: Host | None = None) -> list[dict[str, Any]]:
    return chart_annotations(engine=engine, host=host, start=rng.start, end=rng.end)


def restarts(*, engine: Engine, rng: TimeRange, up_trace: Mapping[str, Any] | None = None) -> list[Mark]:
    """Restarts: the collector's KV-pool rows (written after each restart) and up 0→1 edges."""
    marks: list[Mark] = [
        {"time": row.recorded_at.isoformat(), "title": "restart (KV pool re-read)"}
        for row in KVPoolEntry.objects.filter(
            engine=engine,
            source=KVPoolEntry.Source.COLLECTOR,
            previous__isnull=False,  # the first row is no restart
            recorded_at__range=(rng.start, rng.end),
        )
    ]
    if up_trace:
        ys, ts = up_trace["y"], up_trace["t"]
        marks += [
            {"time": ts[i], "title": "back up"}
            for i in range(1, len(ys))
            if ys[i - 1] is not None and ys[i] is not None and ys[i - 1] < 0.5 <= ys[i]
        ]
    return sorted(marks, key=lambda m: m["time"])


def engine_chart(*, engine: Engine, rng: TimeRange) -> Chart:
    subject = f"engine.{engine.id}"
    up = fetch_points(engine, ["up"], rng)["up"]
    return {
        "range": rng.as_dict(),
        "panels": _panels(ENGINE_PANELS, subject, engine, rng),
        "annotations": annotations(rng=rng, engine=engine),
        "alerts": alert_periods(rng=rng, engine=engine),
        "restarts": restarts(engine=engine, rng=rng, up_trace=up),
        "shaded": [],
    }


def gpu_indexes(host: Host) -> list[int]:
    seen = {g.get("index") for g in (host.latest or {}).get("gpus") or [] if isinstance(g.get("index"), int)}
    for metric in Series.objects.filter(host=host, metric__startswith="gpu").values_list("metric", flat=True):
        match = _GPU_METRIC.match(metric)
        if match:
            seen.add(int(match.group(1)))
    return sorted(seen)


def host_chart(*, host: Host, rng: TimeRange) -> Chart:
    subject = f"host.{host.id}"
    panels = _panels(HOST_PANELS, subject, host, rng)
    for i in gpu_indexes(host):
        panels += _panels(GPU_PANELS, subject, host, rng, prefix=f"gpu{i}.", title_prefix=f"GPU {i} · ")
    return {
        "range": rng.as_dict(),
        "panels": panels,
        "annotations": annotations(rng=rng, host=host),
        "alerts": alert_periods(rng=rng, host=host),
        "restarts": [],
        "shaded": [],
    }
