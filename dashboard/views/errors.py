"""The root URLconf's handler500: a database that refuses is a 503 that says which way
(dashboard/dbfail.py: down, full, read-only, pool exhausted, slow), as a page, or JSON on /api/;
anything else is Django's own 500.

A handler, not a middleware's process_exception: that sees only what views raise, and the
writes that fail first when the disk is full are often a middleware's (the session saved on
the way out of /login/, an API token's last use). Django calls this with the exception being
handled, wherever it was raised. The page is drawn without a template: the app's frame asks the
database who is logged in."""

import sys
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.html import escape
from django.views.defaults import server_error as django_server_error

from dashboard.dbfail import DOWN, Refusal, refusal

RETRY_AFTER_S = 30

TITLES = {
    "down": "The database is down",
    "full": "The database's disk is full",
    "read_only": "The database is read-only",
    "pool_exhausted": "No database connection is free",
    "slow": "The database did not answer in time",
}

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>503 · {title} · SparkOps</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body data-database="{state}"><main>
<h1>{title}</h1>
<p class="reason">503 Service Unavailable: {line}</p>
<p>This request was not completed. Pages work again once the database does: try again in {retry} s.
<a href="/healthz">/healthz</a> says the database's state.</p>
</main></body></html>
"""


def server_error(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    found = refusal(sys.exc_info()[1])
    if found is None:
        return django_server_error(request, *args, **kwargs)
    if found.state == "down":
        DOWN.seen(found)  # the next requests are answered at once while it stays down
    return unavailable_response(request, found)


def unavailable_response(request: HttpRequest, found: Refusal) -> HttpResponse:
    """The 503 for FOUND: JSON on /api/ and /healthz (with /healthz's keys), else a page."""
    response: HttpResponse
    if request.path.startswith("/api/"):
        body = {"error": "database unavailable", "database": found.state, "reason": found.line}
        response = JsonResponse(body, status=503)
    elif request.path == "/healthz":  # a middleware's failure before the view: still its JSON
        response = JsonResponse(
            {
                "status": "unhealthy",
                "message": found.line,
                "database": found.state,
                "redis": "unknown",
                "latest_poll": None,
                "problems": [f"database: {found.line}"],
            },
            status=503,
        )
    else:
        page = PAGE.format(title=TITLES[found.state], state=found.state, line=escape(found.line), retry=RETRY_AFTER_S)
        response = HttpResponse(page, status=503, content_type="text/html; charset=utf-8")
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response
