from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from dashboard.live.cards import engine_card_context
from dashboard.live.ranges import PRESETS
from dashboard.models import Engine


@require_GET
def engine_list(request):
    return render(request, "dashboard/engine_list.html", {"engines": Engine.objects.select_related("host")})


@require_GET
def engine_detail(request, name):
    engine = get_object_or_404(Engine.objects.select_related("host"), name=name)
    others = Engine.objects.exclude(pk=engine.pk).filter(retired_at__isnull=True).values_list("name", flat=True)
    return render(request, "dashboard/engine_detail.html",
                  {**engine_card_context(engine), "ranges": list(PRESETS), "others": list(others)})
