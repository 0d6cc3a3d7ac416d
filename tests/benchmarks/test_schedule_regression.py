"""Scheduling through django-celery-beat, and the benchmark regression alert."""

import json

import pytest
from django_celery_beat.models import PeriodicTask

from sparkops.alerts.models import AlertEvent
from sparkops.benchmarks.models import Profile, Run
from sparkops.benchmarks.regression import judge
from sparkops.benchmarks.schedule import profile_set_schedule, runs_sweep_stale
from sparkops.benchmarks.tasks import bench_profile_scheduled
from sparkops.measured.services import parse_cron
from tests.boxes import box_worker

pytestmark = pytest.mark.django_db(transaction=True)


def scheduled(profile):
    """What beat sends, executed here; the run it sends to PROFILE's box is run by that box's worker."""
    with box_worker(profile.engine.host):
        bench_profile_scheduled(profile.pk)


def test_judge_uses_max_of_5_percent_and_3_spreads():
    hit, d = judge(93.0, [100, 100, 101, 99, 100], +1)  # spread 2 -> threshold max(5, 6) = 6
    assert hit and d["threshold"] == 6
    assert not judge(94.5, [100, 100, 101, 99, 100], +1)[0]  # 5.5 < 6: inside the noise
    assert not judge(96.0, [100] * 5, +1)[0]  # 4 % < 5 %
    assert judge(115.0, [100] * 5, -1)[0]  # TTFT: higher is slower


def test_cron_is_validated():
    assert parse_cron("0 3 * * *")["hour"] == "3"
    for bad in ("", "0 3 * *", "61 3 * * *"):
        with pytest.raises(ValueError):
            parse_cron(bad)


def test_profile_schedule_creates_and_removes_periodic_task(fleet):
    profile = Profile.objects.create(name="p", engine=fleet["vllm"])
    task = profile_set_schedule(profile=profile, cron="30 4 * * 1", enabled=True)
    assert task.task == "bench.profile_scheduled" and json.loads(task.args) == [profile.pk]
    assert (task.crontab.minute, task.crontab.hour, task.crontab.day_of_week) == ("30", "4", "1")
    profile_set_schedule(profile=profile, cron="0 5 * * *", enabled=False)
    task.refresh_from_db()
    assert task.crontab.hour == "5" and not task.enabled and PeriodicTask.objects.count() == 1
    profile_set_schedule(profile=profile, cron="")
    assert PeriodicTask.objects.count() == 0


def test_scheduled_regression_fires_and_resolves(sim, make_engine):
    # Paced at 50 tokens/s (20 ms a token), so the engine's own pacing, not this machine's load,
    # sets the measured rate: at 1,000 tokens/s a loaded machine's scheduling noise was the size
    # of the regression it had to find, and it widened the baseline's spread past it.
    eng = sim("vllm", rate=50.0)
    engine = make_engine(eng.url)
    profile = Profile.objects.create(name="nightly", engine=engine, depth=64, output_tokens=16, reps=1)
    for _ in range(5):
        scheduled(profile)  # the task beat calls; builds the baseline
    runs = list(Run.objects.order_by("created_at"))
    assert [r.status for r in runs] == ["done"] * 5 and not any(r.regression for r in runs)
    assert "needed" in runs[-1].regression_detail["skipped"]

    eng.cfg.rate = 15.0  # the slow state whose clocks look normal
    scheduled(profile)
    slow = Run.objects.latest("created_at")
    assert slow.regression and "decode_tokens_per_s" in slow.regression_detail["regressed"]
    alert = AlertEvent.objects.get(rule="benchmark_regression")
    assert alert.state == "firing" and alert.engine_id == engine.pk and "nightly" in alert.message

    # Recovered. One run is 16 tokens at 50 tokens/s: 5 % of its decode is 16 ms, so at load 8 a single
    # scheduling delay that long makes a run slow, and the product is right to call it a regression.
    # The engine gets up to three runs: while a run is judged slow the alert stays firing; the first
    # run judged in range resolves it, judged against the five baseline runs (regressions stay out).
    eng.cfg.rate = 50.0
    baseline = sorted(r.pk for r in runs)
    recovered = []
    for _ in range(3):
        scheduled(profile)
        run = Run.objects.latest("created_at")
        recovered.append(run)
        alert.refresh_from_db()
        if not run.regression:
            break
        assert alert.state == "firing", run.regression_detail
    details = [r.regression_detail for r in recovered]
    assert not recovered[-1].regression, details
    assert sorted(recovered[-1].regression_detail["baseline_runs"]) == baseline, details
    assert alert.state == "resolved", details


def test_busy_engine_refuses_a_scheduled_run(fleet):
    profile = Profile.objects.create(name="p", engine=fleet["vllm"])
    Run.objects.create(engine=fleet["vllm"], params_hash="x", status="running")
    scheduled(profile)
    run = Run.objects.filter(trigger="scheduled").get()
    assert run.status == "refused" and "running on this engine" in run.reason


def test_sweep_fails_runs_left_running(fleet):
    from datetime import timedelta

    from django.utils import timezone

    old = Run.objects.create(
        engine=fleet["vllm"],
        params_hash="x",
        status="running",
        started_at=timezone.now() - timedelta(days=1),
        config={"params": {"timeout_s": 1, "reps": 1}},
    )
    fresh = Run.objects.create(engine=fleet["vllm"], params_hash="x", status="running", started_at=timezone.now())
    assert runs_sweep_stale() == 1
    old.refresh_from_db()
    fresh.refresh_from_db()
    assert old.status == "failed" and fresh.status == "running"


def test_tainted_when_a_neighbour_generates(sim, make_engine):
    eng = sim("vllm")
    engine = make_engine(eng.url)
    make_engine("http://127.0.0.1:9", name="neighbour", requests_running=2, generation_tokens_per_s=40.0)
    profile = Profile.objects.create(name="p", engine=engine, depth=0, output_tokens=8, reps=1)
    scheduled(profile)
    run = Run.objects.get()
    assert run.status == "done" and run.tainted
    assert any("neighbour" in r for r in run.taint_reasons)
    assert run.conditions["start"]["neighbours"][0]["generating"] is True
