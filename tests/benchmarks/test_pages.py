"""Pages: profiles, the profile form (cron), run page, compare, pair, role checks."""

import pytest
from django.urls import reverse

from sparkops.benchmarks.models import PairRun, Profile, Repetition, Run
from tests.boxes import worker_reported

pytestmark = pytest.mark.django_db


def _run(engine, profile=None, median=100.0, **kw):
    run = Run.objects.create(
        engine=engine,
        profile=profile,
        params_hash=profile.params_hash if profile else "h",
        status="done",
        total_reps=1,
        done_reps=1,
        stats={
            "decode_tokens_per_s": {"n": 1, "median": median, "min": median, "max": median},
            "ttft_ms": {"n": 1, "median": 50.0, "min": 50.0, "max": 50.0},
            "errors": {"overload": 1},
            "reps": 3,
        },
        **kw,
    )
    return run


def test_index_lists_profiles_and_runs(viewer_client, fleet):
    profile = Profile.objects.create(name="deep-32k", engine=fleet["vllm"], depth=32768)
    _run(fleet["vllm"], profile)
    html = viewer_client.get(reverse("bench:index")).content.decode()
    assert "deep-32k" in html and "overload ×1" in html and profile.params_hash in html
    assert reverse("bench:profile-new") not in html  # viewers get no write links


def test_operator_creates_profile_with_schedule(operator_client, fleet):
    data = {
        "name": "nightly",
        "engine": fleet["vllm"].pk,
        "workload": "codegen",
        "instruction": "Write a module.",
        "depth": 16384,
        "mode": "cold",
        "output_tokens": 512,
        "sampling": "server",
        "sampling_params": "",
        "thinking": "off",
        "reps": 3,
        "concurrency": 1,
        "timeout_s": 600,
        "cron": "0 3 * * *",
        "schedule_enabled": "on",
    }
    resp = operator_client.post(reverse("bench:profile-new"), data)
    assert resp.status_code == 302, resp.content.decode()[:2000]
    profile = Profile.objects.get(name="nightly")
    assert profile.schedule.crontab.hour == "3" and profile.schedule.enabled
    page = operator_client.get(reverse("bench:profile", args=[profile.pk])).content.decode()
    assert "0 3 * * *" in page and "plotly" in page


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("reps", 4, "odd"),
        ("cron", "every night", "five cron fields"),
        ("sampling_params", "{oops", "Not JSON"),
        ("concurrency", 4, "deadlocked"),
    ],
)
def test_bad_profile_input_changes_nothing(operator_client, fleet, field, value, message):
    data = {
        "name": "x",
        "engine": fleet["vllm"].pk,
        "workload": "w",
        "instruction": "i",
        "depth": 1024,
        "mode": "cold",
        "output_tokens": 64,
        "sampling": "explicit" if field == "sampling_params" else "server",
        "sampling_params": "",
        "thinking": "server",
        "reps": 3,
        "concurrency": 1,
        "timeout_s": 60,
        field: value,
    }
    resp = operator_client.post(reverse("bench:profile-new"), data)
    assert resp.status_code == 200 and message in resp.content.decode()
    assert not Profile.objects.exists()


def test_viewer_cannot_write(viewer_client, fleet):
    profile = Profile.objects.create(name="p", engine=fleet["vllm"])
    assert viewer_client.post(reverse("bench:profile-run", args=[profile.pk])).status_code == 403
    assert viewer_client.get(reverse("bench:profile-new")).status_code == 403
    assert viewer_client.post(reverse("bench:pair-new"), {}).status_code == 403
    assert not Run.objects.exists()


def test_run_page_shows_every_repetition_and_failure(viewer_client, fleet):
    run = _run(fleet["vllm"], tainted=True, taint_reasons=["neighbour llama-side was generating at the start"])
    Repetition.objects.create(
        run=run,
        index=0,
        started_at=run.created_at,
        ok=True,
        ttft_ms=12.5,
        decode_tokens_per_s=77.5,
        chunks=30,
        completion_tokens=64,
        timings={"prompt_per_second": 900.0, "predicted_per_second": 52.9, "cache_n": 8},
    )
    Repetition.objects.create(
        run=run,
        index=1,
        started_at=run.created_at,
        ok=False,
        bucket="capacity",
        error="HTTP 400: exceeds the available context size",
    )
    html = viewer_client.get(reverse("bench:run", args=[run.pk])).content.decode()
    assert "77.50" in html and "capacity" in html and "exceeds the available context" in html
    assert "neighbour llama-side" in html and "cache_n 8" in html


def test_compare_side_by_side(viewer_client, fleet):
    profile = Profile.objects.create(name="p", engine=fleet["vllm"])
    a, b = _run(fleet["vllm"], profile, 100.0), _run(fleet["vllm"], profile, 64.0)
    html = viewer_client.get(reverse("bench:compare"), {"a": a.pk, "b": b.pk}).content.decode()
    assert "-36.0 %" in html and "not comparable" not in html
    other = _run(fleet["vllm"], None, 50.0)
    assert "not comparable" in viewer_client.get(reverse("bench:compare"), {"a": a.pk, "b": other.pk}).content.decode()
    assert "Pick two runs" in viewer_client.get(reverse("bench:compare"), {"a": "x"}).content.decode()


def test_run_now_queues_on_the_engines_box(operator_client, fleet, django_capture_on_commit_callbacks, redis_url):
    """The run goes to the worker of the engine's own box (host.<name>), so TTFT is measured
    over loopback there; read back from the real broker."""
    import json

    import redis

    queue = fleet["vllm"].host.queue
    broker = redis.Redis.from_url(redis_url)
    broker.delete(queue)
    profile = Profile.objects.create(name="p", engine=fleet["vllm"])
    worker_reported(fleet["host"])
    with django_capture_on_commit_callbacks(execute=True):
        resp = operator_client.post(reverse("bench:profile-run", args=[profile.pk]))
    run = Run.objects.get()
    queued = [json.loads(raw)["headers"] for raw in broker.lrange(queue, 0, -1)]
    broker.delete(queue)
    assert resp.url == reverse("bench:run", args=[run.pk]) and run.status == "queued"
    assert [(h["task"], h["argsrepr"]) for h in queued] == [("bench.run_execute", f"[{run.pk}]")]
    html = operator_client.get(resp.url).content.decode()
    assert 'data-live="1"' in html and "bench/run.js" in html


def test_pair_page_shows_the_table(viewer_client, fleet):
    a = Profile.objects.create(name="a", engine=fleet["vllm"])
    b = Profile.objects.create(name="b", engine=fleet["llama"])
    pair = PairRun.objects.create(
        profile_a=a,
        profile_b=b,
        status="done",
        table={
            "rows": [
                {
                    "engine": "vllm-main",
                    "profile": "a",
                    "solo_decode": 77.5,
                    "both_decode": 28.2,
                    "change_pct": -63.6,
                    "solo_ttft_ms": 1,
                    "both_ttft_ms": 2,
                    "solo_run": _run(fleet["vllm"]).pk,
                    "both_run": _run(fleet["vllm"]).pk,
                }
            ],
            "combined_both_decode": 39.5,
            "best_solo_decode": 77.5,
            "combined_vs_best_solo_pct": -49.0,
        },
    )
    html = viewer_client.get(reverse("bench:pair", args=[pair.pk])).content.decode()
    assert "77.5" in html and "28.2" in html and "-64 %" in html and "39.5" in html


def test_run_progress_json_for_the_pages_catch_up(viewer_client, fleet):
    """run.js asks for this when its socket (re)opens: events sent before then are gone."""
    run = _run(fleet["vllm"])
    Run.objects.filter(pk=run.pk).update(done_reps=2, total_reps=3, status="running")
    got = viewer_client.get(reverse("bench:run", args=[run.pk]), {"format": "progress"}).json()
    assert got == {"run": run.pk, "done": 2, "total": 3, "status": "running"}
