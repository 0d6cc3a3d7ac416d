"""The launch configuration page of one engine (every role may read it; no secret is on it: the
snapshot stores secret values as a hash only, and the page shows them as "redacted")."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from dashboard.models import Engine
from sparkops.launch.page import launch_page


@require_GET
def engine_launch(request: HttpRequest, name: str) -> HttpResponse:
    """ENGINE's newest configuration snapshot read for a person, or `?version=ID` one of its older
    ones. A version that is not one of its snapshots: the newest, with why, as a 404 (400 for one
    that is not a number)."""
    engine = get_object_or_404(Engine.objects.select_related("host"), name=name)
    raw = request.GET.get("version", "").strip()
    error, status = "", 200
    version = None
    if raw and not raw.isdigit():
        error, status = f"Version {raw[:40]!r} is not a snapshot number: showing the newest.", 400
    elif raw:
        version = int(raw)
    try:
        context = launch_page(engine, version=version)
    except LookupError as exc:
        error, status = f"{exc}: showing the newest.", 404
        context = launch_page(engine)
    return render(request, "dashboard/launch_config.html", {**context, "error": error}, status=status)
