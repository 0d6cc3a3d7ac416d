"""Issue 30 §6: static files, plotly.js among them, are served compressed and cached for good
once collected, and plainly (never a broken link) before that or after a file changed."""

import gzip
import os
import re

import brotli
import pytest
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse

from sparkops.staticstore import PLOTLY_DIR, PLOTLY_NAME, StaticStorage, collect_unless_current

IMMUTABLE = "max-age=315360000, public, immutable"
PLOTLY = (PLOTLY_DIR / PLOTLY_NAME).read_bytes()


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    root = tmp_path_factory.mktemp("static")
    with override_settings(STATIC_ROOT=root):
        assert collect_unless_current() is True
        assert collect_unless_current() is False  # current: the next `sparkops up` skips the work
        yield root


def _plotly_url(client):
    html = client.get(reverse("engine-detail", args=["vllm-main"])).content.decode()
    return re.search(r'src="(/static/plotly/plotly[^"]*\.js)"', html).group(1)


def _get(url, encoding):
    return Client().get(url, HTTP_ACCEPT_ENCODING=encoding)  # a fresh WhiteNoise, reading STATIC_ROOT now


def _body(response):
    return b"".join(response.streaming_content)


def test_an_engine_page_names_hashed_plotly_served_compressed_and_immutable(collected, viewer_client, fleet):
    url = _plotly_url(viewer_client)
    assert re.fullmatch(r"/static/plotly/plotly\.min\.[0-9a-f]{12}\.js", url), url
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
            assert _plotly_url(viewer_client) == "/static/plotly/plotly.min.js"
            plain = _get("/static/plotly/plotly.min.js", "br")
            assert plain.status_code == 200 and "immutable" not in plain["Cache-Control"]
            assert _body(plain) == PLOTLY
    finally:
        os.utime(manifest, (stat.st_atime, stat.st_mtime))


def test_without_a_collect_pages_name_the_plain_files_and_they_are_served(tmp_path, viewer_client, fleet):
    with override_settings(STATIC_ROOT=tmp_path):  # empty: never collected
        url = _plotly_url(viewer_client)
        assert url == "/static/plotly/plotly.min.js"
        response = _get(url, "gzip")
        assert response.status_code == 200 and response["Content-Type"].startswith("text/javascript")
        assert _body(response) == PLOTLY


def test_static_files_need_no_login():
    """Public by nature (open-source JS and CSS), and served before the login middleware."""
    response = Client().get("/static/plotly/plotly.min.js")
    assert response.status_code == 200


def test_collectstatic_takes_only_plotlys_bundle_from_the_package(collected):
    collected_plotly = sorted(p.name for p in (collected / "plotly").iterdir())
    assert all(name.startswith("plotly.min.") for name in collected_plotly), collected_plotly
    assert not (collected / "plotly" / "widgetbundle.js").exists()
    call_command("findstatic", "plotly/plotly.min.js", verbosity=0)  # the finder answers findstatic too
