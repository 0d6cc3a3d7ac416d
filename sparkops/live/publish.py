"""A poll's readings -> live events. The poller calls a `LivePublisher` at the end of each tick.

Each event goes to the subject's own group (its detail page) and to the overview group,
carrying numbers for Plotly's extendTraces and the card pre-rendered.

Samples are pushed only while a live socket is open somewhere (presence.py): with no viewer,
a poll renders no card and sends nothing (`stats` counts both cases). Alert and change-log
events are not gated."""

import logging
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from dashboard.dbgate import GATE
from dashboard.livebus import GROUP_OVERVIEW, LiveEvent, engine_group, host_group, publish_on_commit
from dashboard.models import Engine, Host
from sparkops.collectors.derive import EngineReading

from .cards import engine_card_html, host_card_html, worst_alerts
from .presence import Viewers

if TYPE_CHECKING:
    from sparkops.alerts.evaluate import ProbeFinding
    from sparkops.alerts.models import AlertEvent

log = logging.getLogger(__name__)

ENGINE_METRICS = (
    "requests_running",
    "requests_waiting",
    "kv_cache_usage",
    "prefix_cache_hit_rate",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "ttft_p50_s",
    "ttft_p95_s",
    "itl_p50_s",
    "itl_p95_s",
    "kv_pool_tokens",
)
GPU_METRICS = ("sm_clock_mhz", "sm_clock_max_mhz", "utilization_pct", "power_w", "temperature_c")


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _points(pairs: Iterable[tuple[str, object]]) -> dict[str, float]:
    return {k: v for k, v in ((k, _finite(v)) for k, v in pairs) if v is not None}


def engine_points(reading: Mapping[str, Any]) -> dict[str, float]:
    points = _points((m, reading.get(m)) for m in ENGINE_METRICS)
    if "up" in reading:
        points["up"] = 1.0 if reading.get("up") else 0.0
    return points


def host_points(reading: Mapping[str, Any]) -> dict[str, float]:
    h = reading.get("host") or {}
    pairs: list[tuple[str, object]] = [(m, h.get(m)) for m in ("mem_available_bytes", "swap_used_bytes")]
    if _finite(h.get("mem_total_bytes")) is not None and _finite(h.get("mem_available_bytes")) is not None:
        pairs.append(("mem_used_bytes", h["mem_total_bytes"] - h["mem_available_bytes"]))
    for res, part in (h.get("psi") or {}).items():
        for kind, vals in (part or {}).items():
            pairs += [(f"psi.{res}.{kind}.{avg}", (vals or {}).get(avg)) for avg in ("avg10", "avg60")]
    procs = reading.get("processes") or {}
    pairs += [(m, procs.get(m)) for m in ("compilers", "compilers_rss_bytes")]
    for gpu in reading.get("gpus") or []:
        pairs += [(f"gpu{gpu.get('index', 0)}.{m}", gpu.get(m)) for m in GPU_METRICS]
    return _points(pairs)


def _iso(value: datetime | None) -> str:
    return (value or timezone.now()).isoformat()


def engine_event(
    engine: Engine,
    *,
    points: dict[str, float],
    t: str,
    alerts: "Mapping[int | None, AlertEvent] | None" = None,
) -> LiveEvent:
    payload = {
        "engine": engine.name,
        "id": engine.id,
        "status": engine.status,
        "reason": engine.status_reason,
        "t": t,
        "points": points,
        "html": engine_card_html(engine, alerts=alerts),
    }
    return LiveEvent(type="engine.sample", payload=payload)


def publish_engine(
    engine: Engine,
    *,
    points: dict[str, float],
    t: str,
    alerts: "Mapping[int | None, AlertEvent] | None" = None,
) -> None:
    event = engine_event(engine, points=points, t=t, alerts=alerts)
    publish_on_commit(engine_group(engine.id), event)
    publish_on_commit(GROUP_OVERVIEW, event)


class LivePublisher:
    """Pushes a poller's readings to the live view's groups, only while a viewer is present.
    `stats`: "engine.sample" / "host.sample" events built (each renders a card), "skipped"
    samples not built because nobody watched (for tests and benchmarks)."""

    def __init__(self) -> None:
        self.stats: Counter[str] = Counter()
        self.viewers = Viewers()

    def _nothing_to_push(self, samples: int = 1) -> bool:
        """Whether to push nothing now: no page is open, or the database is away. The cards are
        rendered from it (the engine's alerts, its row), and a worker's pushes during an outage
        each waited out the pool's timeout on the poller's thread (CI: 7 waits of 10 s while every
        connection slot was taken). The first push after the outage carries the state whole."""
        if GATE.outage():
            self.stats["skipped_db_away"] += samples
            return True
        if self.viewers.present():
            return False
        self.stats["skipped"] += samples
        return True

    def engines_polled(self, polled: Sequence[tuple[Engine, EngineReading | None]]) -> None:
        """POLLED: (Engine, reading) pairs of one metrics tick."""
        if not polled or self._nothing_to_push(len(polled)):
            return
        alerts = worst_alerts([engine for engine, _ in polled])  # one query for every card
        for engine, reading in polled:
            try:  # one engine's bad reading must not cost the others their push
                publish_engine(engine, points=engine_points(reading or {}), t=_iso(engine.last_poll_at), alerts=alerts)
                self.stats["engine.sample"] += 1
            except Exception:
                log.exception("live push of engine %s failed", engine.pk)

    def liveness(self, finding: "ProbeFinding") -> None:
        """The fast path for "it died": the card turns within a probe, not a metrics poll. An
        unchanged probe says nothing the last card did not (metrics polls refresh it)."""
        if not finding.changed or self._nothing_to_push():
            return
        publish_engine(finding.engine, points={"up": 1.0 if finding.up else 0.0}, t=_iso(finding.checked_at))
        self.stats["engine.sample"] += 1

    def host_polled(self, host: Host, reading: Mapping[str, Any] | None) -> None:
        if self._nothing_to_push():
            return
        payload = {
            "host": host.name,
            "id": host.id,
            "t": _iso(host.last_report_at),
            "points": host_points(reading or {}),
            "html": host_card_html(host),
        }
        event = LiveEvent(type="host.sample", payload=payload)
        publish_on_commit(host_group(host.id), event)
        publish_on_commit(GROUP_OVERVIEW, event)
        self.stats["host.sample"] += 1
