"""plotly.js from the plotly Python package's own bundle: no CDN, the version pinned with the package.

Read once per process; browsers revalidate with an ETag (the package version) and otherwise
cache it for a day (privately: like every page but login and /healthz, it needs a login)."""

from functools import lru_cache
from pathlib import Path

import plotly
from django.http import HttpResponse, HttpResponseNotModified
from django.views.decorators.http import require_GET

MAX_AGE_S = 86400


@lru_cache(maxsize=1)
def plotly_bundle():
    """(bytes, etag) of plotly.min.js as shipped inside the installed plotly package."""
    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    return path.read_bytes(), f'"plotly-{plotly.__version__}"'


@require_GET
def plotly_js(request):
    body, etag = plotly_bundle()
    if request.headers.get("If-None-Match") == etag:
        response = HttpResponseNotModified()
    else:
        response = HttpResponse(body, content_type="text/javascript; charset=utf-8")
    response["ETag"] = etag
    response["Cache-Control"] = f"private, max-age={MAX_AGE_S}"
    return response
