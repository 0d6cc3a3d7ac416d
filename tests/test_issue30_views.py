"""Issue 30 §7, the web items that are not visual, through Django's test client: a retired
engine is offered by no benchmark or probe form, and a posted one is refused."""

from django.utils import timezone

from dashboard.benchmarks.models import PairRun, Profile


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
