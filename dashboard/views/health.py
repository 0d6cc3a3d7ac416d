"""/healthz: lets an outside checker watch the watcher; /livez: the web process answers. No login."""

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from dashboard.healthcheck import health_report


@login_not_required
@require_GET
def livez(request: HttpRequest) -> HttpResponse:  # noqa: ARG001 (a view's signature)
    """Liveness only (no database, no Redis): what a container or proxy healthcheck of the web
    process asks, so a database outage does not get the web container restarted in a loop.
    /healthz stays the deep check of the whole stack."""
    return HttpResponse("ok\n", content_type="text/plain")


@login_not_required
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:  # noqa: ARG001 (a view's signature)
    body = health_report()
    return JsonResponse(body, status=200 if body["status"] == "ok" else 503)
