from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from dashboard.live.cards import host_card_context
from dashboard.live.ranges import PRESETS
from dashboard.models import Engine, Host


@require_GET
def host_detail(request, name):
    host = get_object_or_404(Host, name=name)
    return render(request, "dashboard/host_detail.html", {**host_card_context(host), "ranges": list(PRESETS)})


@require_GET
def coresidency(request):
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
