"""The live pages render from real rows; write controls only for operators."""

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from dashboard.models import Engine
from sparkops.alerts.models import AlertEvent

pytestmark = pytest.mark.django_db

READING = {
    "up": False,
    "status": "down",
    "models": ["llama-3.1-8b"],
    "requests_running": 0,
    "requests_waiting": 0,
    "generation_tokens_per_s": None,
    "kv_cache_usage": 0.1,
    "prefix_cache_hit_rate": 0.92,
    "error": "connection refused",
    "unit": {
        "ActiveState": "inactive",
        "SubState": "dead",
        "Result": "success",
        "ExecMainStatus": "0",
        "Restart": "on-failure",
        "NRestarts": "0",
    },
}
HOST = {
    "host": {
        "mem_total_bytes": 128 * 1024**3,
        "mem_available_bytes": 32 * 1024**3,
        "swap_total_bytes": 16 * 1024**3,
        "swap_used_bytes": 15 * 1024**3,
        "psi": {"memory": {"some": {"avg10": 82.0}, "full": {"avg10": 40.5}}, "cpu": {"some": {"avg10": 3.0}}},
    },
    "gpus": [
        {
            "index": 0,
            "name": "NVIDIA GB10",
            "sm_clock_mhz": 800,
            "sm_clock_max_mhz": 2500,
            "pstate": "P0",
            "utilization_pct": 96,
            "power_w": 31.5,
            "temperature_c": 55,
            "clocks_event_reasons": [],
        }
    ],
    "processes": {"compilers": 21, "compilers_rss_bytes": 69 * 1024**3},
}


@pytest.fixture
def fleet_with_readings(fleet):
    fleet["llama"].latest = READING
    fleet["llama"].save()
    fleet["host"].latest = HOST
    fleet["host"].save()
    now = timezone.now()
    fleet["alert"] = AlertEvent.objects.create(
        rule="engine_down",
        severity="critical",
        state="firing",
        engine=fleet["llama"],
        subject="llama-side",
        message="exited 0",
        started_at=now,
        fired_at=now,
    )
    return fleet


def test_overview_shows_cause_systemd_host_gpu_and_alert(viewer_client, fleet_with_readings):
    html = viewer_client.get(reverse("overview")).content.decode()
    assert 'class="card engine status-down"' in html and "connection refused" in html
    assert "inactive/dead" in html and "Restart=on-failure" in html and "exit status 0" in html
    assert "llama-3.1-8b" in html and "92 %" in html
    assert "96.0 GiB of 128.0 GiB" in html and "15.0 GiB of 16.0 GiB" in html
    assert "82.0 %" in html and "21 alive" in html
    assert "800 / 2,500 MHz" in html and 'class="bad"' in html  # busy P0 at a third of max: stuck low clock
    assert "exited 0" in html
    # The first render draws the card exactly as a pushed update would: with the alert that explains it.
    assert 'class="card-alert sev-critical" data-field="alert"><strong>engine_down</strong>' in html
    assert "js/live.js" in html and not re.findall(r'(?:src|href)="(?:https?:)?//', html)  # nothing from elsewhere


def _overview_queries(client):
    with CaptureQueriesContext(connection) as queries:
        assert client.get(reverse("overview")).status_code == 200
    return len(queries)


def test_overview_queries_do_not_grow_with_engines(viewer_client, fleet_with_readings):
    """One down hand-run engine with its alert first (a hand-run engine's card reads its guarded
    launches: one query for all of them), then three more: the count stays."""
    now = timezone.now()
    before = None
    for i in range(4):
        if i == 1:
            before = _overview_queries(viewer_client)
        engine = Engine.objects.create(
            name=f"extra-{i}",
            kind="vllm",
            url=f"http://127.0.0.1:1810{i}",
            host=fleet_with_readings["host"],
            status="down",
        )
        AlertEvent.objects.create(
            rule="engine_down",
            severity="critical",
            state="firing",
            engine=engine,
            subject=engine.name,
            message="gone",
            started_at=now,
            fired_at=now,
        )
    assert _overview_queries(viewer_client) == before


def _client(user):
    c = Client()
    c.force_login(user)
    return c


def test_viewer_sees_no_ack_operator_does(fleet_with_readings, viewer, operator):
    ack = reverse("alerts:ack", args=[fleet_with_readings["alert"].pk])
    as_viewer = _client(viewer)
    assert ack not in as_viewer.get(reverse("overview")).content.decode()
    assert ack not in as_viewer.get(reverse("live-alerts")).content.decode()
    assert "exited 0" in as_viewer.get(reverse("live-alerts")).content.decode()
    operator_page = _client(operator).get(reverse("live-alerts")).content.decode()
    assert ack in operator_page and "exited 0" in operator_page


def test_detail_pages_render_and_load_plotly_locally(viewer_client, fleet_with_readings):
    for url in (
        reverse("engine-detail", args=["llama-side"]),
        reverse("host-detail", args=["spark-1"]),
        reverse("coresidency") + "?a=vllm-main&b=llama-side",
    ):
        html = viewer_client.get(url).content.decode()
        assert "/static/vendor/plotly-basic-" in html and 'id="charts"' in html, url
        # Nothing loads from another host (the page's CSRF token once held "cdn" by chance: look at the links).
        assert not re.findall(r'(?:src|href)="(?:https?:)?//', html), url


def test_anonymous_is_sent_to_login(client, fleet):
    for url in (reverse("overview"), reverse("chart-engine", args=["vllm-main"]), reverse("live-alerts")):
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]
