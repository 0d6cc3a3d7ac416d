"""The Content-Security-Policy header (django-csp, sparkops/csp.py) on every kind of response,
and the plotly.js style hashes it allows still matching the vendored plotly bundle.
(tests/test_csp_browser.py runs every page under it in Chromium.)"""

import base64
import hashlib
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

pytestmark = pytest.mark.django_db


def _policy(response):
    header = response["Content-Security-Policy"]
    return {part.strip().split(" ", 1)[0]: part.strip().split(" ")[1:] for part in header.split(";") if part.strip()}


@pytest.mark.parametrize(
    "path,status",
    [
        ("/login/", 200),
        ("/", 200),
        ("/engines/", 200),
        ("/alerts/", 200),
        ("/changelog/", 200),
        ("/bench/", 200),
        ("/admin/", 200),
        ("/healthz", None),
        ("/no/such/page/", 404),
    ],
)
def test_every_response_carries_the_policy(admin_client_, path, status):
    response = admin_client_.get(path)
    if status:
        assert response.status_code == status
    policy = _policy(response)
    assert policy["default-src"] == ["'self'"]
    assert policy["script-src"] == ["'self'"]
    assert policy["style-src"][0] == "'self'" and "'unsafe-inline'" not in policy["style-src"]
    assert policy["img-src"] == ["'self'", "data:"]
    assert policy["frame-ancestors"] == ["'none'"] and policy["object-src"] == ["'none'"]
    assert policy["base-uri"] == ["'self'"] and policy["form-action"] == ["'self'"]
    # The live view's socket: this host's ws:// and wss:// origins, nothing wider.
    assert policy["connect-src"] == ["'self'", "ws://testserver", "wss://testserver"]


def test_connect_src_follows_the_host_the_page_was_asked_for(settings):
    settings.ALLOWED_HOSTS = ["ops.example.org"]
    response = Client(HTTP_HOST="ops.example.org").get("/login/")
    assert _policy(response)["connect-src"] == ["'self'", "ws://ops.example.org", "wss://ops.example.org"]


def test_a_bad_host_header_gets_a_400_with_the_plain_policy():
    response = Client(HTTP_HOST="evil.example").get("/login/")
    assert response.status_code == 400
    assert _policy(response)["connect-src"] == ["'self'"]


def test_the_lockout_page_carries_the_policy(viewer):
    client = Client(REMOTE_ADDR="10.4.4.4")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        response = client.post("/login/", {"username": "vera", "password": "wrong"})
    assert response.status_code == 429
    assert _policy(response)["script-src"] == ["'self'"]


def _sha256(text):
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_the_plotly_style_hashes_match_the_vendored_bundle():
    """plotly.js adds empty <style> elements it fills through the CSSOM, and injects one fixed
    stylesheet (maplibre's) at load: the policy allows exactly those by hash. After a plotly
    upgrade this says which hash to put in settings.PLOTLY_MAPLIBRE_STYLE."""
    from django.contrib.staticfiles import finders

    from sparkops.staticstore import PLOTLY_STATIC

    body = Path(finders.find(PLOTLY_STATIC)).read_text(encoding="utf-8")
    assert _sha256("") == settings.PLOTLY_EMPTY_STYLE
    assert re.search(
        r'createElement\("style"\),n\.setAttribute\("id",\w\),n\.appendChild\(document\.createTextNode\(""\)\)', body
    )
    injected = re.findall(r'createElement\("style"\);e\.id="[0-9a-f]+",e\.textContent=\'([^\'\\]*)\'', body)
    assert len(injected) == 1, "plotly.js injects other stylesheets now: run tests/test_csp_browser.py"
    assert _sha256(injected[0]) == settings.PLOTLY_MAPLIBRE_STYLE, (
        f"set PLOTLY_MAPLIBRE_STYLE = {_sha256(injected[0])!r}"
    )
    assert body.count('createElement("style")') == 2
    for source in (settings.PLOTLY_EMPTY_STYLE, settings.PLOTLY_MAPLIBRE_STYLE):
        assert source in settings.CONTENT_SECURITY_POLICY["DIRECTIVES"]["style-src"]
