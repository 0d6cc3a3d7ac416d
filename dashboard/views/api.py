"""A small read-only JSON API for scripts: a logged-in session, like every page, or a read-only
API token (`Authorization: Bearer`, dashboard/tokens/)."""

import json
from datetime import datetime

from django.http import HttpRequest, HttpResponse, JsonResponse

from dashboard.engine_lifecycle import engine_as_dict
from dashboard.models import Engine
from sparkops.alerts import selectors
from sparkops.benchmarks.models import Run
from sparkops.changelog.export import export_json

MAX_LIMIT = 1000


def _limit(request: HttpRequest, default: int = 200) -> tuple[int, JsonResponse | None]:
    """?limit=N (1..1000); a bad value is a 400 with the reason, never a 500."""
    raw = request.GET.get("limit", "")
    if not raw:
        return default, None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_LIMIT:
        return 0, JsonResponse(
            {"error": f"limit must be a whole number from 1 to {MAX_LIMIT}, not {raw!r}"}, status=400
        )
    return value, None


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def engines(request: HttpRequest) -> HttpResponse:  # noqa: ARG001 (a view's signature)
    rows = []
    for engine in Engine.objects.select_related("host"):
        rows.append({**engine_as_dict(engine), "latest": engine.latest})
    return JsonResponse({"engines": rows})


def alerts(request: HttpRequest) -> HttpResponse:
    """?state=open|pending|firing|resolved, ?rule=, ?engine=, ?limit= (newest first)."""

    limit, error = _limit(request)
    if error:
        return error
    state = request.GET.get("state", "")
    if state not in ("", "open", "pending", "firing", "resolved"):
        return JsonResponse({"error": f"state must be open, pending, firing or resolved, not {state!r}"}, status=400)
    events = selectors.alert_list(
        state=state, rule=request.GET.get("rule", ""), engine=request.GET.get("engine", ""), limit=limit
    )
    rows = [
        {
            "id": a.pk,
            "rule": a.rule,
            "severity": a.severity,
            "state": a.state,
            "subject": a.subject,
            "engine": a.engine.name if a.engine is not None else None,
            "host": a.host.name if a.host is not None else None,
            "cause": a.cause,
            "message": a.message,
            "started_at": _iso(a.started_at),
            "fired_at": _iso(a.fired_at),
            "resolved_at": _iso(a.resolved_at),
            "acknowledged_at": _iso(a.acknowledged_at),
            "acknowledged_by": a.acknowledged_by.get_username() if a.acknowledged_by is not None else None,
        }
        for a in events
    ]
    return JsonResponse({"alerts": rows})


def changelog(request: HttpRequest) -> HttpResponse:  # noqa: ARG001 (a view's signature)
    """Every change-log entry with its flags, claims, evidence and corrections, as
    `sparkops changelog export --format json` writes them."""

    return JsonResponse({"entries": json.loads(export_json())})


def bench_runs(request: HttpRequest) -> HttpResponse:
    """Benchmark runs, newest first (?engine=, ?limit=)."""

    limit, error = _limit(request)
    if error:
        return error
    runs = Run.objects.select_related("engine", "profile").order_by("-created_at", "-pk")
    if request.GET.get("engine"):
        runs = runs.filter(engine__name=request.GET["engine"])
    rows = [
        {
            "id": r.pk,
            "engine": r.engine.name,
            "profile": r.profile.name if r.profile is not None else None,
            "status": r.status,
            "reason": r.reason,
            "trigger": r.trigger,
            "created_at": _iso(r.created_at),
            "started_at": _iso(r.started_at),
            "finished_at": _iso(r.finished_at),
            "params_hash": r.params_hash,
            "tainted": r.tainted,
            "taint_reasons": r.taint_reasons,
            "regression": r.regression,
            "done_reps": r.done_reps,
            "total_reps": r.total_reps,
            "stats": r.stats,
        }
        for r in runs[:limit]
    ]
    return JsonResponse({"runs": rows})
