"""What a run measured (configuration) and under which conditions, from the collectors'
latest readings; and why a run is tainted (a busy neighbour, a firing alert)."""

from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from django.apps import apps
from django.db.models import Q
from django.utils import timezone

from dashboard.models import Engine

from .registry import KINDS

if TYPE_CHECKING:
    from dashboard.models import ConfigSnapshot

    from .models import MeasuredRun

REGRESSION_RULE = "benchmark_regression"
NEIGHBOUR_BUSY_TOKENS_PER_S = 0.5


class RunSpec(Protocol):
    """What a run's configuration records of its kind's spec."""

    def as_dict(self) -> dict[str, Any]: ...
    def params_hash(self) -> str: ...


def config_snapshot(*, engine: Engine, spec: RunSpec, info: Mapping[str, Any]) -> dict[str, Any]:
    latest = engine.latest or {}
    return {
        "params": spec.as_dict(),
        "params_hash": spec.params_hash(),
        "engine": {
            "name": engine.name,
            "kind": engine.kind,
            "url": engine.url,
            "models": latest.get("models") or ([info["model"]] if info.get("model") else []),
            "version": info.get("version"),
            "kv_pool_tokens": latest.get("kv_pool_tokens"),
            "window": latest.get("window") or info.get("window"),
        },
        "prompt": {k: info.get(k) for k in ("filler_words", "calibrated_prompt_tokens", "counted_by")},
    }


def _gpu(gpu: Mapping[str, Any]) -> dict[str, Any]:
    keys = (
        "index",
        "name",
        "sm_clock_mhz",
        "sm_clock_max_mhz",
        "pstate",
        "power_w",
        "utilization_pct",
        "temperature_c",
        "clocks_event_reasons",
    )
    return {k: gpu.get(k) for k in keys}


def _psi(host_latest: Mapping[str, Any]) -> dict[str, float]:
    psi = (host_latest.get("host") or {}).get("psi") or {}
    out: dict[str, float] = {}
    for res in ("memory", "cpu", "io"):
        for kind in ("some", "full"):
            value = ((psi.get(res) or {}).get(kind) or {}).get("avg10")
            if value is not None:
                out[f"{res}.{kind}.avg10"] = value
    return out


def _busy(latest: Mapping[str, Any]) -> bool:
    running = latest.get("requests_running") or 0
    rate = latest.get("generation_tokens_per_s") or 0
    return running > 0 or rate > NEIGHBOUR_BUSY_TOKENS_PER_S


def conditions_snapshot(*, engine: Engine, partner_ids: Collection[int] = ()) -> dict[str, Any]:
    """GPU clocks and PSI of the engine's host, and which other engines were generating."""
    engine = Engine.objects.select_related("host").get(pk=engine.pk)
    host_latest = engine.host.latest or {}
    neighbours: list[dict[str, Any]] = []
    for other in Engine.objects.filter(host=engine.host).exclude(pk=engine.pk):
        latest = other.latest or {}
        neighbours.append(
            {
                "name": other.name,
                "partner": other.pk in partner_ids,
                "requests_running": latest.get("requests_running"),
                "generation_tokens_per_s": latest.get("generation_tokens_per_s"),
                "generating": _busy(latest),
            }
        )
    own = engine.latest or {}
    return {
        "at": timezone.now().isoformat(),
        "gpus": [_gpu(g) for g in host_latest.get("gpus") or []],
        "psi": _psi(host_latest),
        "neighbours": neighbours,
        "engine": {
            "requests_running": own.get("requests_running"),
            "kv_cache_usage": own.get("kv_cache_usage"),
            "status": engine.status,
        },
    }


def firing_alerts_during(*, engine: Engine, start: datetime | None, end: datetime | None) -> list[str]:
    """Warning and critical alerts (other than the benchmark's own) that fired on this engine or its host
    during [start, end]; an advisory (severity info) never taints a run."""
    try:
        AlertEvent = apps.get_model("alerts", "AlertEvent")
    except LookupError:  # the alert engine is not installed yet
        return []
    subject = Q(engine=engine) | Q(host=engine.host_id)
    overlap = Q(started_at__lte=end) & (Q(resolved_at__isnull=True) | Q(resolved_at__gte=start))
    rows = AlertEvent.objects.filter(subject, overlap).exclude(state="pending").exclude(rule=REGRESSION_RULE)
    rows = rows.exclude(severity="info")
    return [f"alert {getattr(a, 'rule', '?')} ({getattr(a, 'severity', '?')}) was firing{_whose(a)}" for a in rows[:10]]


def _whose(alert: object) -> str:
    """A request-contract alert judges the operator's traffic only: the taint says so."""
    excluded = (getattr(alert, "details", None) or {}).get("own_excluded")
    if excluded is None:
        return ""
    return f" (operator's traffic only, {excluded:.0f} of SparkOps's own requests excluded)"


def taint_reasons(
    *,
    engine: Engine,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    start: datetime | None,
    end: datetime | None,
) -> list[str]:
    reasons: list[str] = []
    for when, snap in (("start", before), ("end", after)):
        for n in snap.get("neighbours", []):
            if n["generating"] and not n["partner"]:
                reasons.append(f"neighbour {n['name']} was generating at the {when}")
        busy = (snap.get("engine") or {}).get("requests_running") or 0
        if when == "start" and busy:
            reasons.append(f"the engine was already serving {busy} request(s) at the start")
    return reasons + firing_alerts_during(engine=engine, start=start, end=end)


# --- "every cron job on the box has to respect that after a reboot" --------------------------

START_GRACE_S = 900.0  # how long an unanswered start counts as one when the unit's TimeoutStartSec is not known
STALE_HOST_S = 300.0  # a host reading older than this says nothing about what starts now


def box_starting(engine: Engine, *, now: datetime | None = None) -> str | None:
    """Why ENGINE's box is inside a start of one of its engines (ENGINE's own included), or None.

    Inside a start: the engine's unit is `activating` (the main process loading, the readiness
    helper in ExecStartPost running, an auto-restart pending), or the unit is active but the
    engine has not answered since the unit's main process started, for at most the unit's
    TimeoutStartSec (past that it is "active but not answering", an alert, not a start). Read
    from what the box's worker last stored (the host's `systemctl show` of its units, each
    engine's last good answer, its measured starts), so any worker can ask. Scheduled
    benchmarks and probes call it and wait while it says why: measured during a cold start a
    run measures the compile storm, and a probe adds load to a box that may be out of memory."""
    from dashboard.systemctl_show import parse_timestamp
    from sparkops.launch.snapshot import latest_snapshot

    now = now or timezone.now()
    host = engine.host
    if host.last_report_at is None or (now - host.last_report_at).total_seconds() > STALE_HOST_S:
        return None  # no recent reading: the collector-stale alert speaks for the box
    units = (host.latest or {}).get("units") or {}
    for other in Engine.objects.filter(host=host, retired_at__isnull=True).exclude(unit="").order_by("name"):
        props = units.get(other.unit) or {}
        state, sub = props.get("ActiveState"), props.get("SubState") or ""
        since = parse_timestamp(props.get("ExecMainStartTimestamp") or "")
        at = f" since {since:%H:%M:%S} UTC" if since else ""
        if state == "activating":
            what = "waiting to restart" if sub == "auto-restart" else f"activating ({sub or 'start'})"
            return f"{other.name} is starting: its unit {other.unit} is {what}{at}"
        if state != "active" or since is None:
            continue
        if other.last_ok_at is not None and other.last_ok_at >= since + timedelta(seconds=1):
            continue  # it answered after its start (systemd's timestamps are whole seconds)
        if other.starts.filter(started_at=since).exists():
            continue  # that start was measured to its end
        snap = latest_snapshot(other)
        timeout = _timeout_s(snap)
        if (now - since).total_seconds() <= timeout:
            return f"{other.name} is starting: its unit {other.unit} is active{at} but the engine has not answered yet"
    return None


def engine_busy(engine: Engine, *, asking: "MeasuredRun") -> str | None:
    """Why a scheduled run (ASKING) should not start on ENGINE now: a run of any measured kind
    (`registry.KINDS`: a benchmark, a probe) already running there (each would measure the other's
    load), or None. Every kind asks this one question; the asking run's own kind is named first
    ("another benchmark …")."""
    kinds = sorted(KINDS.values(), key=lambda kind: not isinstance(asking, kind.run_model))
    for kind in kinds:
        model = kind.run_model
        rows = model.objects.filter(engine=engine, status=model.Status.RUNNING)
        if isinstance(asking, model):
            rows = rows.exclude(pk=asking.pk)
        busy = rows.order_by("pk").first()
        if busy is not None:
            article = "another" if isinstance(asking, model) else "a"
            return f"{article} {kind.what} (run {busy.pk}) is running on this engine"
    return None


def _timeout_s(snap: "ConfigSnapshot | None") -> float:
    from sparkops.collectors.unitconfig import timespan_s

    value = timespan_s(((snap.data or {}).get("unit") or {}).get("timeout_start_usec")) if snap else None
    return START_GRACE_S if value in (None, float("inf")) or value <= 0 else value
