from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from dashboard.models import Engine, Host
from dashboard.selectors.fleet import fleet_counts, fleet_tiles
from sparkops.live.cards import host_card_context
from sparkops.live.ranges import PRESETS


def fleet_context() -> dict:
    """What templates/dashboard/partials/_fleet_grid.html reads: the tiles, problems first, and their counts."""
    tiles = fleet_tiles()
    return {"tiles": tiles, "counts": fleet_counts(tiles)}


@require_GET
def host_list(request: HttpRequest) -> HttpResponse:
    """The top menu's Hosts: the fleet at a glance (a tile per box, its engines as chips, problems
    first, kept live by "fleet.delta" events), then every box with its last report and its links."""
    watched = Prefetch("engines", queryset=Engine.objects.filter(retired_at__isnull=True).order_by("name"))
    hosts = Host.objects.prefetch_related(watched).order_by("name")
    return render(request, "dashboard/host_list.html", {"hosts": hosts, **fleet_context()})


@require_GET
def fleet_grid_partial(request: HttpRequest) -> HttpResponse:
    """The grid again, fetched by fleet.js when its socket (re)connects or a box or engine came or went."""
    return render(request, "dashboard/partials/_fleet_grid.html", fleet_context())


@require_GET
def host_detail(request: HttpRequest, name: str) -> HttpResponse:
    host = get_object_or_404(Host, name=name)
    return render(request, "dashboard/host_detail.html", {**host_card_context(host), "ranges": list(PRESETS)})


@require_GET
def coresidency(request: HttpRequest) -> HttpResponse:
    """Two engines' decode rates on one chart; defaults to the first two engines."""
    names = list(Engine.objects.values_list("name", flat=True))
    a = request.GET.get("a") or (names[0] if names else "")
    b = request.GET.get("b") or next((n for n in names if n != a), "")
    engines = {e.name: e for e in Engine.objects.filter(name__in=[a, b])}
    return render(
        request,
        "dashboard/coresidency.html",
        {"names": names, "a": engines.get(a), "b": engines.get(b), "ranges": list(PRESETS)},
    )
