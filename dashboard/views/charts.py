"""Chart JSON for the live pages (read-only; every signed-in role may fetch it).

`?range=15m|1h|6h|24h|7d|30d` or `?start=ISO&end=ISO`; a bad range is a 400 with the reason.
Long ranges come from rollups, so no series carries more than 2,000 points."""

from collections.abc import Callable, Mapping
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET

from dashboard.models import Engine, Host
from sparkops.live.chartdata import engine_chart, host_chart
from sparkops.live.coresidency import coresidency_chart
from sparkops.live.ranges import RangeError, parse_range
from sparkops.live.sparks import overview_sparks


def _json(build: Callable[..., Mapping[str, object]], request: HttpRequest, **subjects: Any) -> JsonResponse:
    try:
        rng = parse_range(request.GET)
    except RangeError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    response = JsonResponse(build(rng=rng, **subjects))
    response["Cache-Control"] = "no-store"
    return response


@require_GET
def engine_chart_json(request: HttpRequest, name: str) -> HttpResponse:
    return _json(engine_chart, request, engine=get_object_or_404(Engine, name=name))


@require_GET
def host_chart_json(request: HttpRequest, name: str) -> HttpResponse:
    return _json(host_chart, request, host=get_object_or_404(Host, name=name))


@require_GET
def coresidency_chart_json(request: HttpRequest) -> HttpResponse:
    a, b = request.GET.get("a", ""), request.GET.get("b", "")
    if not a or not b or a == b:
        return JsonResponse({"error": "Pick two different engines: ?a=NAME&b=NAME."}, status=400)
    return _json(coresidency_chart, request, a=get_object_or_404(Engine, name=a), b=get_object_or_404(Engine, name=b))


@require_GET
def overview_sparks_json(request: HttpRequest) -> HttpResponse:  # noqa: ARG001 (a view's signature)
    """The last 15 minutes of each card's sparkline, keyed "<subject>|<metric>"."""

    return JsonResponse({"sparks": overview_sparks()})
