"""/explore/ (the page: pickers, one chart) and /explore/data.json (the chart's JSON), both read
from the same query string, so the page's address is the view. Every signed-in role may read them."""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.models import Engine, Host
from sparkops.live.ranges import PRESETS

from .selectors import DEFAULT_RANGE, ExploreError, explore_catalogue, explore_chart, metric_info, view_parse


@require_GET
def explore_page(request: HttpRequest) -> HttpResponse:
    catalogue = explore_catalogue()
    chosen = {
        "metrics": request.GET.getlist("metric"),
        "engines": request.GET.getlist("engine"),
        "hosts": request.GET.getlist("host"),
        "range": request.GET.get("range", "") if not request.GET.get("start") else "",
        # a datetime-local input takes no zone: the address's "…Z" (UTC, as a zoom writes it) shown without it
        "start": request.GET.get("start", "").removesuffix("Z")[:16],
        "end": request.GET.get("end", "").removesuffix("Z")[:16],
    }
    error = ""
    if request.GET:
        try:
            view_parse(request.GET)
        except ExploreError as exc:
            error = str(exc)
    groups = [
        (title, [(m, metric_info(m).label, names) for m, names in sorted(catalogue[kind].items())])
        for kind, title in (("engine", "Engine series"), ("host", "Box series"))
    ]
    return render(
        request,
        "explore/page.html",
        {
            "groups": groups,
            "engines": Engine.objects.order_by("retired_at", "name"),
            "hosts": Host.objects.order_by("name"),
            "presets": list(PRESETS),
            "default_range": DEFAULT_RANGE,
            "chosen": chosen,
            "error": error,
            "query": request.GET.urlencode(),
        },
        status=400 if error else 200,
    )


@require_GET
def explore_data(request: HttpRequest) -> JsonResponse:
    try:
        view = view_parse(request.GET)
    except ExploreError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    response = JsonResponse(explore_chart(view=view))
    response["Cache-Control"] = "no-store"
    return response
