"""Server-rendered cards: the same partials draw the first page and every pushed update."""

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.template.loader import render_to_string
from django.utils import timezone

from dashboard.clock import report_lag_s
from dashboard.models import Engine, Host
from dashboard.selectors.launches import guarded_launches
from sparkops.alerts.models import AlertEvent

PSI_RESOURCES = ("memory", "cpu", "io")
# "Busy, P0, clock far below max" is the stuck-low-clock signature; the card flags it red.
LOW_CLOCK_SHARE = 0.6
BUSY_UTIL_PCT = 80


# A journal line this long before the engine went down still explains it (vLLM's API server exits ~4.5 s
# after its EngineCore died; a readiness gate may sit for minutes).
FATAL_LINE_SLACK = timedelta(minutes=10)


def _line_time(line: Mapping[str, Any]) -> datetime | None:
    try:
        return datetime.fromtimestamp(int(line["time_us"]) / 1e6, tz=UTC)
    except (KeyError, TypeError, ValueError, OverflowError, OSError):
        return None


def _clock(at: datetime) -> str:
    return timezone.localtime(at).strftime("%H:%M:%S") + " " + timezone.get_current_timezone_name()


def _sentence(text: object) -> str:
    text = " ".join(str(text).split())
    return text if text.endswith((".", "!", "?")) else text + "."


def fatal_line_sentence(line: Mapping[str, Any], *, unit: str = "") -> str:
    """One journal fatal line (the collector's dict) as a sentence with its time."""
    at = _line_time(line)
    who = "the kernel" if line.get("kernel") else (line.get("unit") or unit or "the unit")
    message = line.get("message") or line.get("signature") or "a fatal error"
    return (f"At {_clock(at)} " if at else "") + f"{who} logged: " + _sentence(message)


def last_error(engine: Engine, reading: Mapping[str, Any]) -> str:
    """Why ENGINE is not serving, as one sentence with the time; "" while it is up (the engine page
    keeps the history). The journal's latest fatal line of this death wins over the poll's error."""
    if engine.status == "up" or not (reading.get("error") or reading.get("fatal_lines")):
        return ""
    since = engine.status_changed_at or engine.last_poll_at
    for line in reversed(reading.get("fatal_lines") or []):
        at = _line_time(line) if isinstance(line, dict) else None
        if at is not None and (since is None or at >= since - FATAL_LINE_SLACK):
            return fatal_line_sentence(line, unit=engine.unit)
    error = reading.get("error")
    if not error:
        return ""
    return (f"At {_clock(since)} " if since else "") + "the poll failed: " + _sentence(error)


# The card's value each engine rule fires on: drawn in the alert's colour while it fires.
ALERT_FIELDS = {"prefix_cache_drop": "prefix", "kv_saturated": "kv", "queue_growing": "queue"}


def worst_alerts(engines: Sequence[Engine]) -> dict[int | None, AlertEvent]:
    """{engine id: the firing alert that explains its state best} (critical first, newest first), in one query."""

    firing = AlertEvent.objects.filter(engine__in=engines, state="firing").exclude(severity="info")
    worst: dict[int | None, AlertEvent] = {}  # every one has an engine (the filter)
    hot: dict[int | None, dict[str, str]] = {}  # engine id -> {card field: severity}
    for event in firing.order_by("severity", "-fired_at"):  # "critical" sorts before "warning"
        worst.setdefault(event.engine_id, event)
        field = ALERT_FIELDS.get(event.rule)
        if field:
            hot.setdefault(event.engine_id, {}).setdefault(field, event.severity)
    for engine_id, event in worst.items():
        event.hot = hot.get(engine_id, {})  # {card field: severity}: the values an alert is firing on
    return worst


def engine_card_context(
    engine: Engine,
    *,
    alerts: Mapping[int | None, AlertEvent] | None = None,
    launches: Mapping[int, Any] | None = None,
) -> dict[str, Any]:
    """ALERTS: worst_alerts() of many engines, LAUNCHES: guarded_launches() of them, when a list page
    fetched them in one go (a card of an engine with a unit asks nothing for its launch)."""

    reading = engine.latest or {}
    alerts = worst_alerts([engine]) if alerts is None else alerts
    launches = guarded_launches([engine]) if launches is None else launches
    return {
        "launch": launches.get(engine.id),
        "engine": engine,
        "r": reading,
        "unit": reading.get("unit") or None,
        "last_error": last_error(engine, reading),
        "alert": alerts.get(engine.id),
    }


def engine_card_html(engine: Engine, *, alerts: Mapping[int | None, AlertEvent] | None = None) -> str:
    return render_to_string("dashboard/partials/_engine_card.html", engine_card_context(engine, alerts=alerts))


def _psi_rows(psi: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name in PSI_RESOURCES:
        part = (psi or {}).get(name) or {}
        some, full = (part.get("some") or {}).get("avg10"), (part.get("full") or {}).get("avg10")
        if some is not None or full is not None:
            rows.append({"name": name, "some": some, "full": full})
    return rows


def _gpu_view(gpu: Mapping[str, Any]) -> dict[str, Any]:
    clock, top, util = gpu.get("sm_clock_mhz"), gpu.get("sm_clock_max_mhz"), gpu.get("utilization_pct")
    low = bool(
        clock
        and top
        and util is not None
        and util >= BUSY_UTIL_PCT
        and clock < LOW_CLOCK_SHARE * top
        and not gpu.get("clocks_event_reasons")
    )
    return {**gpu, "low_clock": low}


def host_card_context(host: Host) -> dict[str, Any]:
    latest = host.latest or {}
    h = latest.get("host") or {}
    total, avail = h.get("mem_total_bytes"), h.get("mem_available_bytes")
    swap_total, swap_used = h.get("swap_total_bytes") or 0, h.get("swap_used_bytes") or 0
    limit = timedelta(seconds=settings.SPARKOPS_POLL_INTERVAL * 5 + report_lag_s())  # stored every flush interval
    stale = host.last_report_at is None or timezone.now() - host.last_report_at > limit
    return {
        "host": host,
        "h": h,
        "p": latest.get("processes") or {},
        "psi": _psi_rows(h.get("psi")),
        "mem_used": (total - avail) if total is not None and avail is not None else None,
        "swap_share": swap_used / swap_total * 100 if swap_total else 0,
        "gpus": [_gpu_view(g) for g in latest.get("gpus") or []],
        "stale": stale,
    }


def host_card_html(host: Host) -> str:
    return render_to_string("dashboard/partials/_host_card.html", host_card_context(host))


def error_history(engine: Engine, *, limit: int = 12) -> list[dict[str, Any]]:
    """The engine page's record of what went wrong: its recent warning and critical alerts (with when
    they fired and resolved) and the journal's fatal lines still held, newest first."""

    events = (
        AlertEvent.objects.filter(engine=engine)
        .exclude(state="pending")
        .exclude(severity="info")
        .order_by("-started_at")[:limit]
    )
    rows: list[dict[str, Any]] = [
        {
            "at": e.fired_at or e.started_at,
            "until": e.resolved_at,
            "what": e.rule + (f" · {e.cause}" if e.cause else ""),
            "text": e.message,
            "alert": e.pk,
        }
        for e in events
    ]
    for line in (engine.latest or {}).get("fatal_lines") or []:
        if isinstance(line, dict) and _line_time(line):
            rows.append(
                {
                    "at": _line_time(line),
                    "until": None,
                    "what": "journal",
                    "text": fatal_line_sentence(line, unit=engine.unit),
                    "alert": None,
                }
            )
    return sorted(rows, key=lambda r: r["at"], reverse=True)[:limit]
