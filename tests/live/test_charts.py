"""Chart JSON: real rows in, the numbers, overlays and point budget out."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard.models import KVPoolEntry
from sparkops.alerts.models import AlertEvent
from sparkops.changelog.models import Entry

from .helpers import add_minute_rollups, add_samples

pytestmark = pytest.mark.django_db


def _panel(body, pid):
    return next(p for p in body["panels"] if p["id"] == pid)


def test_engine_chart_carries_samples_annotations_alerts_and_restarts(viewer_client, fleet):
    vllm, now = fleet["vllm"], timezone.now()
    add_samples(metric="generation_tokens_per_s", values=[60.0, 62.0, 0.0, 64.0], end=now, engine=vllm)
    add_samples(metric="ttft_p95_s", values=[0.25], end=now, engine=vllm)
    entry = Entry.objects.create(
        effective_at=now - timedelta(minutes=20), title="--max-model-len 65536", kind="flag_change"
    )
    entry.engines.add(vllm)
    Entry.objects.create(effective_at=now - timedelta(hours=3), title="too old for 1h", kind="flag_change")
    AlertEvent.objects.create(
        rule="engine_down",
        severity="critical",
        state="resolved",
        engine=vllm,
        subject="vllm-main",
        message="exit 0",
        started_at=now - timedelta(minutes=30),
        fired_at=now - timedelta(minutes=29),
        resolved_at=now - timedelta(minutes=25),
    )
    first = KVPoolEntry.objects.create(
        engine=vllm, recorded_at=now - timedelta(minutes=50), pool_tokens=400000, source="collector"
    )
    KVPoolEntry.objects.create(
        engine=vllm, recorded_at=now - timedelta(minutes=24), pool_tokens=360000, source="collector", previous=first
    )

    body = viewer_client.get(reverse("chart-engine", args=["vllm-main"]), {"range": "1h"}).json()

    tokens = _panel(body, "tokens")
    decode = tokens["traces"][0]
    assert (decode["metric"], decode["y"], decode["subject"]) == (
        "generation_tokens_per_s",
        [60.0, 62.0, 0.0, 64.0],
        f"engine.{vllm.id}",
    )
    assert _panel(body, "ttft")["traces"][1]["y"] == [250.0]  # seconds drawn as ms
    assert [a["title"] for a in body["annotations"]] == ["--max-model-len 65536"]
    assert body["annotations"][0]["url"] == entry.get_absolute_url()
    assert [(a["severity"], a["title"][:11]) for a in body["alerts"]] == [("critical", "engine_down")]
    assert [r["title"] for r in body["restarts"]] == ["restart (KV pool re-read)"]


def test_seven_days_come_from_rollups_within_the_point_budget(viewer_client, fleet):
    vllm, now = fleet["vllm"], timezone.now()
    add_minute_rollups(
        metric="generation_tokens_per_s",
        start=now - timedelta(days=7),
        minutes=7 * 1440,
        value=60.0,
        spike_at=5000,
        spike=240.0,
        engine=vllm,
    )
    body = viewer_client.get(reverse("chart-engine", args=["vllm-main"]), {"range": "7d"}).json()
    decode = _panel(body, "tokens")["traces"][0]
    assert decode["source"] == "1m"
    assert 1000 < len(decode["t"]) <= 2000
    assert max(decode["y_max"]) == 240.0  # the spike survives the bucketing


@pytest.mark.parametrize(
    "params, message",
    [
        ({"range": "2w"}, "Unknown range"),
        ({"start": "yesterday"}, "ISO date"),
        ({"start": "2026-03-02T00:00", "end": "2026-03-01T00:00"}, "after its start"),
    ],
)
def test_bad_range_is_a_clear_400(viewer_client, fleet, params, message):
    response = viewer_client.get(reverse("chart-engine", args=["vllm-main"]), params)
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_custom_range_bounds_the_data(viewer_client, fleet):
    vllm, now = fleet["vllm"], timezone.now()
    add_samples(metric="requests_running", values=[1, 2, 3, 4, 5, 6], end=now, step_s=60, engine=vllm)
    start, end = (now - timedelta(minutes=3, seconds=30)).isoformat(), (now - timedelta(seconds=30)).isoformat()
    body = viewer_client.get(reverse("chart-engine", args=["vllm-main"]), {"start": start, "end": end}).json()
    assert body["range"]["key"] == "custom"
    assert _panel(body, "requests")["traces"][0]["y"] == [3.0, 4.0, 5.0]


def test_host_chart_has_a_panel_set_per_gpu(viewer_client, fleet):
    host, now = fleet["host"], timezone.now()
    add_samples(metric="gpu0.sm_clock_mhz", values=[2400.0, 810.0], end=now, host=host)
    add_samples(metric="mem_used_bytes", values=[64 * 1024**3], end=now, host=host)
    body = viewer_client.get(reverse("chart-host", args=["spark-1"]), {"range": "15m"}).json()
    assert _panel(body, "gpu0.clock")["traces"][0]["y"] == [2400.0, 810.0]
    assert _panel(body, "memory")["traces"][0]["y"] == [64.0]  # GiB
    assert "gpu1.clock" not in {p["id"] for p in body["panels"]}


def test_coresidency_shades_overlap_and_measures_the_penalty(viewer_client, fleet):
    now = timezone.now()
    # vllm alone at 60 tok/s, then both generate and vllm drops to 30; llama idle, then 20.
    add_samples(
        metric="generation_tokens_per_s", values=[60, 60, 60, 30, 30, 30], end=now, step_s=10, engine=fleet["vllm"]
    )
    add_samples(
        metric="generation_tokens_per_s", values=[0, 0, 0, 20, 20, 20], end=now, step_s=10, engine=fleet["llama"]
    )
    body = viewer_client.get(reverse("chart-coresidency"), {"a": "vllm-main", "b": "llama-side", "range": "15m"}).json()
    assert len(body["shaded"]) == 1
    assert body["shaded"][0]["start"] == body["panels"][0]["traces"][0]["t"][3]
    assert body["stats"]["vllm-main"] == {"alone": 60.0, "together": 30.0, "penalty_pct": 50.0}
    bad = viewer_client.get(reverse("chart-coresidency"), {"a": "vllm-main", "b": "vllm-main"})
    assert bad.status_code == 400


def test_an_outage_leaves_a_gap_and_each_panel_names_its_unit(viewer_client, fleet):
    """Issue 19: lines were drawn straight across an outage; decode hid under prompt on a shared axis;
    GPU utilisation and temperature shared one; axes carried no units."""
    vllm, now = fleet["vllm"], timezone.now()
    add_samples(metric="generation_tokens_per_s", values=[60.0] * 10, end=now - timedelta(minutes=5), engine=vllm)
    add_samples(metric="generation_tokens_per_s", values=[62.0] * 10, end=now, engine=vllm)  # 4.5 minutes dark between
    body = viewer_client.get(reverse("chart-engine", args=["vllm-main"]), {"range": "1h"}).json()
    decode = _panel(body, "tokens")
    ys = decode["traces"][0]["y"]
    assert ys == [60.0] * 10 + [None] + [62.0] * 10, ys
    assert [t["metric"] for t in decode["traces"]] == ["generation_tokens_per_s"]
    assert [t["metric"] for t in _panel(body, "prompt")["traces"]] == ["prompt_tokens_per_s"]
    assert {p["id"]: p["unit"] for p in body["panels"]}["kv"] == "% of the pool"
    assert all(p["unit"] for p in body["panels"]), [p["id"] for p in body["panels"] if not p["unit"]]
