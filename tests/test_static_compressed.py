"""Issue 30 §6: static files, plotly.js among them, are served compressed and cached for good
once collected, and plainly (never a broken link) before that or after a file changed; plotly.js
is the vendored "basic" partial bundle, pinned by version and sha256."""

import gzip
import hashlib
import os
import re
from pathlib import Path

import brotli
import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse

from sparkops.staticstore import PLOTLY_STATIC, StaticStorage, collect_unless_current

# Its module-scoped fixture is built once a run, on one worker.
pytestmark = pytest.mark.xdist_group("test_static_compressed")

IMMUTABLE = "max-age=315360000, public, immutable"
PLOTLY_PLAIN = "/static/" + PLOTLY_STATIC
PLOTLY = Path(finders.find(PLOTLY_STATIC)).read_bytes()


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    root = tmp_path_factory.mktemp("static")
    with override_settings(STATIC_ROOT=root):
        assert collect_unless_current() is True
        assert collect_unless_current() is False  # current: the next `sparkops up` skips the work
        yield root


def _plotly_url(client):
    html = client.get(reverse("engine-detail", args=["vllm-main"])).content.decode()
    return re.search(r'src="(/static/vendor/plotly-[^"]*\.js)"', html).group(1)


def _get(url, encoding):
    return Client().get(url, HTTP_ACCEPT_ENCODING=encoding)  # a fresh WhiteNoise, reading STATIC_ROOT now


def _body(response):
    return b"".join(response.streaming_content)


def test_an_engine_page_names_hashed_plotly_served_compressed_and_immutable(collected, viewer_client, fleet):
    url = _plotly_url(viewer_client)
    assert re.fullmatch(r"/static/vendor/plotly-basic-4\.1\.1\.min\.[0-9a-f]{12}\.js", url), url
    br = _get(url, "gzip, deflate, br")
    assert br.status_code == 200 and br["Content-Encoding"] == "br" and br["Cache-Control"] == IMMUTABLE
    assert brotli.decompress(_body(br)) == PLOTLY and int(br["Content-Length"]) < len(PLOTLY) / 3
    gz = _get(url, "gzip")
    assert gz["Content-Encoding"] == "gzip" and gz["Cache-Control"] == IMMUTABLE
    assert gzip.decompress(_body(gz)) == PLOTLY
    plain = _get(url, "")
    assert "Content-Encoding" not in plain and _body(plain) == PLOTLY
    assert "br" in br["Vary"] or "Accept-Encoding" in br["Vary"]


def test_the_projects_own_css_and_js_are_hashed_and_compressed_too(collected, viewer_client, fleet):
    html = viewer_client.get(reverse("overview")).content.decode()
    urls = re.findall(r'(?:src|href)="(/static/(?:css|js)/[^"]+)"', html)
    assert urls and all(re.search(r"\.[0-9a-f]{12}\.(css|js)$", u) for u in urls), urls
    for url in urls:
        response = _get(url, "br")
        assert response["Cache-Control"] == IMMUTABLE, url
        assert response.get("Content-Encoding") == "br" or int(response["Content-Length"]) < 200, url


def test_a_static_file_changed_since_the_collect_is_served_plain_until_collected_again(collected, viewer_client, fleet):
    """A checkout's CSS edited after `sparkops up` collected: the old hashed copy must not be named."""
    manifest = collected / StaticStorage.manifest_name
    stat = manifest.stat()
    os.utime(manifest, (stat.st_atime, 0))  # collected before every source file's last change
    try:
        with override_settings(STATIC_ROOT=collected):  # a fresh storage reads the manifest again
            assert _plotly_url(viewer_client) == PLOTLY_PLAIN
            plain = _get(PLOTLY_PLAIN, "br")
            assert plain.status_code == 200 and "immutable" not in plain["Cache-Control"]
            assert _body(plain) == PLOTLY
    finally:
        os.utime(manifest, (stat.st_atime, stat.st_mtime))


def test_without_a_collect_pages_name_the_plain_files_and_they_are_served(tmp_path, viewer_client, fleet):
    with override_settings(STATIC_ROOT=tmp_path):  # empty: never collected
        url = _plotly_url(viewer_client)
        assert url == PLOTLY_PLAIN
        response = _get(url, "gzip")
        assert response.status_code == 200 and response["Content-Type"].startswith("text/javascript")
        assert _body(response) == PLOTLY


def test_static_files_need_no_login():
    """Public by nature (open-source JS and CSS), and served before the login middleware."""
    response = Client().get(PLOTLY_PLAIN)
    assert response.status_code == 200


def test_the_vendored_plotly_is_the_pinned_basic_bundle():
    """`make vendor-plotly` fetches plotly.js-basic-dist-min at PLOTLY_JS_VERSION and checks
    PLOTLY_JS_SHA256: the file the pages name is that one, unmodified."""
    makefile = (settings.BASE_DIR / "Makefile").read_text()
    version = re.search(r"^PLOTLY_JS_VERSION\s*:=\s*(\S+)", makefile, re.M).group(1)
    sha256 = re.search(r"^PLOTLY_JS_SHA256\s*:=\s*(\S+)", makefile, re.M).group(1)
    assert f"vendor/plotly-basic-{version}.min.js" == PLOTLY_STATIC
    assert hashlib.sha256(PLOTLY).hexdigest() == sha256
    assert PLOTLY.startswith(b"/**\n* plotly.js (basic - minified) v" + version.encode())


def test_collectstatic_takes_the_vendored_bundle_and_no_other_plotly(collected):
    assert sorted(p.name for p in (collected / "vendor").iterdir() if p.name.startswith("plotly-basic-4.1.1.min."))
    assert not (collected / "plotly").exists()
    call_command("findstatic", PLOTLY_STATIC, verbosity=0)
