"""GET /metrics: SparkOps' readings for Prometheus (dashboard/exporter.py), behind a read-only
API token (`Authorization: Bearer`, see dashboard/tokens/) or a logged-in session. Without
either: 401, not the login page, so a scraper says what is wrong."""

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from dashboard.exporter import exposition
from dashboard.tokens.middleware import unauthorized


@login_not_required
def metrics(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        return unauthorized("/metrics needs an API token: Authorization: Bearer TOKEN (sparkops token create USER)")
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_PLAIN_0_0_4)  # every Prometheus 2 and 3 reads it
