"""The root URLconf's handler500: a database that refuses is a 503 with its reason in one line
(dashboard/dbfail.py), JSON on /api/; anything else is Django's own 500.

A handler, not a middleware's process_exception: that sees only what views raise, and the
writes that fail first when the disk is full are often a middleware's (the session saved on
the way out of /login/, an API token's last use). Django calls this with the exception being
handled, wherever it was raised."""

import sys

from django.http import HttpResponse, JsonResponse
from django.views.defaults import server_error as django_server_error

from dashboard.dbfail import unavailable

RETRY_AFTER_S = 30


def server_error(request, *args, **kwargs):
    reason = unavailable(sys.exc_info()[1])
    if reason is None:
        return django_server_error(request, *args, **kwargs)
    response: HttpResponse
    if request.path.startswith("/api/"):
        response = JsonResponse({"error": "database unavailable", "reason": reason}, status=503)
    else:
        response = HttpResponse(
            f"503 Service Unavailable: {reason}\n", status=503, content_type="text/plain; charset=utf-8"
        )
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response
