"""Explore (issue 51): the chart's JSON for a view given as a query string — one stored series of two
engines over a custom range, with the change-log entries and alerts of those engines as overlays —
and every bad view refused with the reason. The page itself in Chromium: tests/test_explore_browser.py."""

import html
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from dashboard.models import Engine
from sparkops.alerts.models import AlertEvent
from sparkops.changelog.services import entry_create
from tests.live.helpers import add_samples

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
RANGE = {"start": "2026-11-10T11:00Z", "end": "2026-11-10T12:00Z"}


@pytest.fixture
def history(fleet, operator):
    """Half an hour of KV usage of both engines (raw samples, 2 s apart), an entry on vllm-main at
    11:40, one on llama-side at 11:45, a box-wide one (no engine: drawn on every chart), one on an
    engine not chosen (not drawn) and a warning on llama-side."""
    vllm, llama, host = fleet["vllm"], fleet["llama"], fleet["host"]
    other = Engine.objects.create(name="other", kind="vllm", url="http://127.0.0.1:18003", host=host)
    end = NOW - timedelta(minutes=5)
    add_samples(metric="kv_cache_usage", values=[0.5] * 900, end=end, engine=vllm)
    add_samples(metric="kv_cache_usage", values=[0.25] * 900, end=end, engine=llama)
    add_samples(metric="generation_tokens_per_s", values=[40.0] * 900, end=end, engine=vllm)
    add_samples(metric="psi.memory.some.avg10", values=[3.0] * 60, end=end, host=host)
    for when, engines, title in (
        (NOW - timedelta(minutes=20), [vllm], "--max-num-seqs 8 -> 16"),
        (NOW - timedelta(minutes=15), [llama], "--ctx-size 32768"),
        (NOW - timedelta(minutes=10), [], "box-wide: driver 580"),
        (NOW - timedelta(minutes=8), [other], "another engine's change"),
    ):
        entry_create(author=operator, effective_at=when, title=title, kind="decision", engines=engines)
    AlertEvent.objects.create(
        rule="kv_saturated",
        severity="warning",
        state="resolved",
        engine=llama,
        subject=llama.name,
        message="KV usage of llama-side above 95 %",
        started_at=NOW - timedelta(minutes=30),
        fired_at=NOW - timedelta(minutes=29),
        resolved_at=NOW - timedelta(minutes=25),
    )
    return fleet


def _get(client, path, params):
    with time_machine.travel(NOW, tick=False):
        return client.get(path, params)


def test_one_series_of_two_engines_with_their_entries_and_alerts(viewer_client, history):
    params = {"metric": "kv_cache_usage", "engine": ["vllm-main", "llama-side"], **RANGE}
    response = _get(viewer_client, "/explore/data.json", params)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["range"]["key"] == "custom" and body["range"]["start"] == "2026-11-10T11:00:00+00:00"
    assert [t["name"] for t in body["traces"]] == ["vllm-main", "llama-side"]
    vllm, llama = body["traces"]
    assert len(vllm["t"]) == 900 and set(vllm["y"]) == {0.5} and set(llama["y"]) == {0.25}
    assert vllm["subject"] == f"engine.{history['vllm'].pk}" and vllm["metric"] == "kv_cache_usage"
    assert body["title"] == "KV-cache usage" and body["tickformat"] == ".0%"
    assert [a["title"] for a in body["annotations"]] == [
        "--max-num-seqs 8 -> 16",
        "--ctx-size 32768",
        "box-wide: driver 580",
    ]
    assert [(a["subject"], a["severity"]) for a in body["alerts"]] == [("llama-side", "warning")]


def test_several_metrics_and_a_box_on_one_chart(viewer_client, history):
    params = {"metric": ["kv_cache_usage", "generation_tokens_per_s"], "engine": "vllm-main", **RANGE}
    body = _get(viewer_client, "/explore/data.json", params).json()
    assert [t["name"] for t in body["traces"]] == ["vllm-main · KV-cache usage", "vllm-main · Decode (tokens/s)"]
    assert body["unit"] == "" and body["tickformat"] == ""  # two units: no single axis title
    box = _get(viewer_client, "/explore/data.json", {"metric": "psi.memory.some.avg10", "host": "spark-1", **RANGE})
    assert [t["name"] for t in box.json()["traces"]] == ["spark-1"]


def test_the_page_lists_every_stored_series_and_keeps_the_view(viewer_client, history):
    params = {"metric": "kv_cache_usage", "engine": ["vllm-main", "llama-side"], **RANGE}
    page = _get(viewer_client, "/explore/", params).content.decode()
    for metric in ("kv_cache_usage", "generation_tokens_per_s", "psi.memory.some.avg10"):
        assert f'value="{metric}"' in page
    assert '<option value="kv_cache_usage" title="kv_cache_usage: llama-side, vllm-main" selected>' in page
    assert 'name="engine" value="llama-side" checked' in page and 'name="host" value="spark-1">' in page
    assert 'value="2026-11-10T11:00"' in page  # the custom range, in the inputs
    assert '<option value="" selected>custom: from / to</option>' in page
    assert 'data-src="/explore/data.json?metric=kv_cache_usage&amp;engine=vllm-main&amp;engine=llama-side' in page


@pytest.mark.parametrize(
    "params,message",
    [
        ({"engine": "vllm-main"}, "Pick a metric"),
        ({"metric": "kv_cache_usage"}, "Pick at least one engine or box"),
        ({"metric": "kv_cache_usage", "engine": "nope"}, "No engine is called 'nope'"),
        ({"metric": "no_such", "engine": "vllm-main"}, "No stored series is called 'no_such'"),
        ({"metric": "kv_cache_usage", "engine": "vllm-main", "range": "2y"}, "Unknown range '2y'"),
        ({"metric": "kv_cache_usage", "engine": "vllm-main", "start": "yesterday"}, "start must be an ISO date"),
    ],
)
def test_a_bad_view_is_refused_with_the_reason(viewer_client, history, params, message):
    response = _get(viewer_client, "/explore/data.json", params)
    assert response.status_code == 400 and message in response.json()["error"]
    page = _get(viewer_client, "/explore/", params)
    assert page.status_code == 400 and message in html.unescape(page.content.decode())
