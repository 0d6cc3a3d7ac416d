"""Sample store: writes, rollups, retention and the spike-preserving read API."""

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.models import Rollup, Sample
from dashboard.samples import store
from dashboard.selectors.series import choose_source, series_points, series_points_many

pytestmark = pytest.mark.django_db


def series_of(**subject):
    return store.SeriesIds().get(**subject)


def test_write_skips_none_and_nan(fleet):
    now = timezone.now()
    batch = store.WriteBatch(store.SeriesIds())  # the poller's write path
    batch.add_samples(
        ts=now,
        engine=fleet["vllm"],
        values={"requests_running": 3, "kv_cache_usage": None, "ttft_p50_s": float("nan"), "up": True},
    )
    assert len(batch.samples) == 2
    batch.flush()
    assert batch.samples == []
    pts = series_points(
        metric="requests_running",
        engine=fleet["vllm"],
        start=now - timedelta(minutes=1),
        end=now + timedelta(seconds=1),
    )
    assert pts["y"] == [3.0] and pts["source"] == "raw"


def test_last_hour_raw_and_spike_survives_downsampling(fleet):
    host = fleet["host"]
    end = timezone.now().replace(microsecond=0)
    start = end - timedelta(hours=6)
    rows = []
    sid = series_of(metric="gpu0.sm_clock_mhz", host_id=host.pk)
    for i in range(6 * 1800):  # every 2 s for 6 h
        value = 800.0 if i == 5000 else 2400.0
        rows.append(Sample(series_id=sid, ts=start + timedelta(seconds=2 * i), value=value))
    Sample.objects.bulk_create(rows, batch_size=5000)
    pts = series_points(metric="gpu0.sm_clock_mhz", host=host, start=start, end=end, max_points=500)
    assert pts["source"] == "raw" and 0 < len(pts["t"]) <= 500
    assert min(pts["y_min"]) == 800.0  # the 2-second dip is kept
    assert min(pts["y"]) > 800.0  # ...though the mean hides it
    last_hour = series_points(metric="gpu0.sm_clock_mhz", host=host, start=end - timedelta(hours=1), end=end)
    assert len(last_hour["t"]) == 1800 and last_hour["y"] == last_hour["y_max"]


def test_rollups_minute_then_hour_and_read_from_rollups(fleet):
    engine = fleet["vllm"]
    base = (timezone.now() - timedelta(days=3)).replace(minute=0, second=0, microsecond=0)
    sid = series_of(metric="generation_tokens_per_s", engine_id=engine.pk)
    Sample.objects.bulk_create(
        [Sample(series_id=sid, ts=base + timedelta(seconds=2 * i), value=float(i % 30)) for i in range(1800 * 2)]
    )  # two hours
    made = store.rollups_minute(end=base + timedelta(hours=2), lookback=timedelta(hours=2))
    assert made == 120
    minute = Rollup.objects.get(series_id=sid, resolution=60, ts=base)
    assert (minute.min, minute.max, minute.count) == (0.0, 29.0, 30)
    assert store.rollups_hour(end=base + timedelta(hours=2), lookback=timedelta(hours=2)) == 2
    hour = Rollup.objects.get(series_id=sid, resolution=3600, ts=base)
    assert hour.count == 1800 and hour.max == 29.0 and abs(hour.mean - 14.5) < 1e-9
    # a 3-day-old range is past raw retention: served from rollups, min/max intact
    pts = series_points(metric="generation_tokens_per_s", engine=engine, start=base, end=base + timedelta(hours=2))
    assert pts["source"] == "1m" and len(pts["t"]) == 120 and max(pts["y_max"]) == 29.0
    many = series_points_many(
        metrics=["generation_tokens_per_s", "nope"], engine=engine, start=base, end=base + timedelta(hours=2)
    )
    assert many["nope"]["t"] == [] and len(many["generation_tokens_per_s"]["t"]) == 120


def test_choose_source_bounds_points():
    now = timezone.now()
    src, bucket = choose_source(start=now - timedelta(days=7), end=now, max_points=2000, now=now)
    assert src == "1m" and 7 * 86400 / bucket <= 2000
    assert choose_source(start=now - timedelta(days=200), end=now, max_points=2000, now=now)[0] == "1h"


def test_retention_drops_old_raw_only(fleet):
    now = timezone.now()
    sid = series_of(metric="requests_running", engine_id=fleet["vllm"].pk)
    Sample.objects.bulk_create(
        [
            Sample(series_id=sid, ts=now - timedelta(hours=49), value=1),
            Sample(series_id=sid, ts=now - timedelta(hours=47), value=2),
        ]
    )
    Rollup.objects.create(series_id=sid, resolution=60, ts=now - timedelta(days=91), min=1, mean=1, max=1, count=1)
    Rollup.objects.create(series_id=sid, resolution=3600, ts=now - timedelta(days=400), min=1, mean=1, max=1, count=1)
    assert store.retention_apply(now=now) == 2
    assert list(Sample.objects.values_list("value", flat=True)) == [2.0]
    assert Rollup.objects.filter(resolution=3600).count() == 1
