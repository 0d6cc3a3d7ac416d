"""Requests no view can answer sensibly are refused before any view runs."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBadRequest, HttpResponseBase

from dashboard.dbfail import DOWN
from dashboard.views.errors import unavailable_response

NUL = "\x00"


GetResponse = Callable[[HttpRequest], HttpResponseBase]


class RejectNulMiddleware:
    """400 for a NUL character anywhere in the path, the query string or a form field.

    No name, id or text SparkOps stores can hold one, and PostgreSQL refuses it in any query
    ("text fields cannot contain NUL (0x00) bytes"), so `/engines/%00/` or `?engine=%00` would
    otherwise be a 500 wherever a view looks it up. Django's forms already reject NUL in a
    field; this covers the path converters and the parameters views read directly."""

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        where = self._nul_in(request)
        if where:
            return HttpResponseBadRequest(
                f"Bad request: the {where} contains a NUL character (%00).", content_type="text/plain; charset=utf-8"
            )
        return self.get_response(request)

    @staticmethod
    def _nul_in(request: HttpRequest) -> str:
        if NUL in request.path_info:
            return "address"
        for name, params in (("query string", request.GET), ("form", request.POST)):
            for key, values in params.lists():
                if NUL in key or any(NUL in v for v in values if isinstance(v, str)):
                    return name
        return ""


class DatabaseDownMiddleware:
    """While this process knows the database server is down (dbfail.DOWN: a request found it
    down, and a connection of our own is still refused, asked at most once a second), a request
    is answered at once with the page that says so, instead of each waiting the pool's timeout
    (10 s) to say it again: with PostgreSQL stopped every page waited 10 s (issue 46). /livez
    needs no database and /healthz asks for itself."""

    PASS = ("/livez", "/healthz")

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if request.path_info not in self.PASS:
            found = DOWN.now()
            if found is not None:
                return unavailable_response(request, found)
        return self.get_response(request)
