"""Issue 30 §7, the web items that are not visual, through Django's test client: a retired
engine is offered by no benchmark or probe form, and a posted one is refused."""

from django.utils import timezone

from sparkops.benchmarks.models import PairRun, Profile


def _retire(engine):
    engine.retired_at = timezone.now()
    engine.save(update_fields=["retired_at"])


def test_no_benchmark_or_probe_form_offers_a_retired_engine(operator_client, fleet):
    live, gone = fleet["vllm"], fleet["llama"]
    a = Profile.objects.create(name="live-a", engine=live)
    Profile.objects.create(name="live-b", engine=live)
    old = Profile.objects.create(name="gone-a", engine=gone)
    _retire(gone)
    # the co-residency pair form on the benchmarks page, the profile form, the probe profile form
    bench = operator_client.get("/bench/").content.decode()
    pair_form = bench[bench.index('action="/bench/pairs/new/"') :]
    assert "live-a" in pair_form and "gone-a" not in pair_form
    for url in ("/bench/profiles/new/", "/probes/profiles/new/"):
        page = operator_client.get(url).content.decode()
        assert f'<option value="{live.pk}"' in page and f'<option value="{gone.pk}"' not in page, url
    r = operator_client.post("/bench/pairs/new/", {"profile_a": a.pk, "profile_b": old.pk})
    assert r.status_code in (200, 302) and not PairRun.objects.exists()  # refused, nothing queued


def test_a_30_day_chart_reaches_the_newest_sample(viewer_client, fleet):
    """30 days in 2,000 points are 22-minute buckets of minute rollups, drawn at each bucket's
    start: the line ended ~10 min before now. It ends at the newest sample."""
    from datetime import datetime, timedelta

    from dashboard.samples import store
    from tests.live.helpers import add_samples

    now = timezone.now()
    engine = fleet["vllm"]
    add_samples(metric="generation_tokens_per_s", values=[80.0] * 900, end=now - timedelta(seconds=1), engine=engine)
    store.rollups_minute(end=now - timedelta(minutes=3), lookback=timedelta(hours=1))  # the rollup lags the samples
    data = viewer_client.get(f"/charts/engine/{engine.name}.json?range=30d").json()
    (decode,) = [t for p in data["panels"] for t in p["traces"] if t["metric"] == "generation_tokens_per_s"]
    assert decode["source"] == "1m"  # 30 days: minute rollups in buckets
    last = datetime.fromisoformat(decode["t"][-1])
    assert now - last < timedelta(seconds=5), (now, last)  # the newest sample, 1 s before now
    assert decode["y"][-1] == 80.0


def test_human_duration():
    from datetime import timedelta

    from sparkops.changelog.ledgers import human_duration

    cases = {
        timedelta(seconds=44.6): "45 s",
        timedelta(seconds=117.126392): "1 min 57 s",
        timedelta(minutes=2): "2 min",
        timedelta(hours=2, minutes=5, seconds=10): "2 h 5 min",
        timedelta(days=3, hours=4, minutes=59): "3 d 4 h",
        timedelta(days=1): "1 d",
    }
    assert {d: human_duration(d) for d in cases} == cases
    assert human_duration(None) == ""
