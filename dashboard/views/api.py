"""A small read-only JSON API for scripts (session login, like every page)."""
from django.http import JsonResponse

from dashboard.models import Engine
from dashboard.services.fleet import engine_as_dict


def engines(request):
    rows = []
    for engine in Engine.objects.select_related("host"):
        rows.append({**engine_as_dict(engine), "latest": engine.latest})
    return JsonResponse({"engines": rows})
