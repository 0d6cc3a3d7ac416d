"""The web app manifest: SparkOps on a phone's home screen opens full screen on the live view."""

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.templatetags.static import static
from django.urls import reverse
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET


@login_not_required
@require_GET
@cache_control(max_age=3600, public=True)
def manifest(request: HttpRequest) -> HttpResponse:  # noqa: ARG001 (a view's signature)
    icons = [
        {"src": static(f"icons/sparkops-{n}.png"), "sizes": f"{n}x{n}", "type": "image/png", "purpose": "any"}
        for n in (192, 512)
    ]
    icons.append({"src": static("icons/sparkops.svg"), "sizes": "any", "type": "image/svg+xml"})
    body = {
        "name": "SparkOps",
        "short_name": "SparkOps",
        "description": "Engines, alerts and the change log of your LLM boxes",
        "start_url": reverse("overview"),
        "scope": "/",
        "display": "standalone",
        "background_color": "#f6f7f9",
        "theme_color": "#1c2230",
        "icons": icons,
    }
    return JsonResponse(body, content_type="application/manifest+json")
