"""Requests no view can answer sensibly are refused before any view runs."""

from django.http import HttpResponseBadRequest

NUL = "\x00"


class RejectNulMiddleware:
    """400 for a NUL character anywhere in the path, the query string or a form field.

    No name, id or text SparkOps stores can hold one, and PostgreSQL refuses it in any query
    ("text fields cannot contain NUL (0x00) bytes"), so `/engines/%00/` or `?engine=%00` would
    otherwise be a 500 wherever a view looks it up. Django's forms already reject NUL in a
    field; this covers the path converters and the parameters views read directly."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        where = self._nul_in(request)
        if where:
            return HttpResponseBadRequest(
                f"Bad request: the {where} contains a NUL character (%00).", content_type="text/plain; charset=utf-8"
            )
        return self.get_response(request)

    @staticmethod
    def _nul_in(request):
        if NUL in request.path_info:
            return "address"
        for name, params in (("query string", request.GET), ("form", request.POST)):
            for key, values in params.lists():
                if NUL in key or any(NUL in v for v in values if isinstance(v, str)):
                    return name
        return ""
