"""Scheduled probes: the beat task runs a profile's probe, a worse result than the last good run fires
`quality_regression` (warning) quoting what changed, and the next good run resolves it. A probe that
was never good does not alert, and a probe's own open alert does not taint the run that resolves it."""

import json

import pytest

from sparkops.alerts.models import AlertEvent
from sparkops.probes.models import ProbeProfile, ProbeRun
from sparkops.probes.schedule import probe_set_schedule
from sparkops.probes.tasks import probe_profile_scheduled
from tests.boxes import box_worker

pytestmark = pytest.mark.django_db


def scheduled(profile):
    with box_worker(profile.engine.host):  # the box's worker, there: it runs what is sent to it
        probe_profile_scheduled(profile.pk)  # what beat sends, executed here
    return ProbeRun.objects.filter(profile=profile).latest("created_at")


def alert(profile):
    return AlertEvent.objects.filter(rule="quality_regression", subject=f"probe {profile.name}").first()


def test_needle_recall_drop_fires_and_next_good_run_resolves(sim, make_engine):
    eng = sim("vllm")
    engine = make_engine(eng.url, name="sim-vllm")
    profile = ProbeProfile.objects.create(
        name="needle-2k", engine=engine, kind="needle", tokens=1500, depths="10,50,90"
    )
    task = probe_set_schedule(profile=profile, cron="0 3 * * *")
    assert task.task == "probe.profile_scheduled" and json.loads(task.args) == [profile.pk]

    good = scheduled(profile)
    assert good.trigger == "scheduled" and good.passed is True and alert(profile) is None

    eng.cfg.needle_recall, eng.cfg.needle_decoy = "10:1,50:1,90:0", 1.0  # the deep needle now goes to a decoy
    bad = scheduled(profile)
    assert bad.passed is False and bad.regression is True
    event = alert(profile)
    assert event.state == "firing" and event.severity == "warning" and event.engine == engine
    assert "90%: HIT -> DECOY 3/3" in event.message and event.cause == f"probe run {bad.pk}"

    again = scheduled(profile)  # still bad: the alert stays open, the run is not tainted by it
    assert again.tainted is False and again.regression is True
    assert AlertEvent.objects.filter(rule="quality_regression").count() == 1

    eng.cfg.needle_recall = "1"
    fixed = scheduled(profile)
    assert fixed.passed is True and fixed.regression is False
    event.refresh_from_db()
    assert event.state == "resolved" and event.resolved_at is not None


def test_a_probe_that_was_never_good_does_not_alert(sim, make_engine):
    eng = sim("vllm", tool_calls="strings")
    profile = ProbeProfile.objects.create(name="tools", engine=make_engine(eng.url), kind="tool")
    run = scheduled(profile)
    assert run.passed is False and run.regression is False and alert(profile) is None
    assert "no earlier good run" in run.regression_detail["skipped"]


def test_soak_degenerating_and_tool_calls_turning_to_strings_fire(sim, make_engine):
    eng = sim("vllm", rate=20000.0)
    engine = make_engine(eng.url)
    soak = ProbeProfile.objects.create(name="soak", engine=engine, kind="soak", tokens=2000)
    tools = ProbeProfile.objects.create(name="tools", engine=engine, kind="tool")
    assert scheduled(soak).passed and scheduled(tools).passed
    eng.cfg.degenerate_after, eng.cfg.tool_calls = 1000, "strings"
    assert scheduled(soak).regression and scheduled(tools).regression
    assert "degenerate in 3/3 (hex from token 1,000)" in alert(soak).message
    assert "raw 0/3 valid, coerced 3/3" in alert(tools).message


def test_bad_cron_is_refused(sim, make_engine):
    profile = ProbeProfile.objects.create(name="x", engine=make_engine(sim("vllm").url), kind="tool")
    with pytest.raises(ValueError, match="five cron fields"):
        probe_set_schedule(profile=profile, cron="every night")
    profile.refresh_from_db()
    assert profile.schedule is None


def _starting(host, engine, state):
    from django.utils import timezone

    engine.unit = "vllm-main.service"
    engine.save(update_fields=["unit"])
    sub = "start" if state == "activating" else "running"
    host.latest = {"units": {"vllm-main.service": {"ActiveState": state, "SubState": sub}}}
    host.last_report_at = timezone.now()
    host.save(update_fields=["latest", "last_report_at"])


def test_a_scheduled_probe_waits_while_the_box_is_starting(sim, make_engine, host, django_capture_on_commit_callbacks):
    from dashboard.schedule import BEAT_SCHEDULE
    from sparkops.celery import app
    from sparkops.probes.schedule import probe_runs_release_postponed

    engine = make_engine(sim("vllm").url, name="sim-vllm")
    _starting(host, engine, "activating")
    profile = ProbeProfile.objects.create(name="tools", engine=engine, kind="tool")
    result = probe_profile_scheduled.apply(args=[profile.pk])  # returns at once: no retry, a row that waits
    assert result.successful(), result.traceback
    (run,) = ProbeRun.objects.filter(profile=profile)
    assert run.status == "queued" and run.cases.count() == 0
    assert run.reason.startswith("postponed: sim-vllm is starting")
    assert probe_runs_release_postponed() == 0 and ProbeRun.objects.get(pk=run.pk).status == "queued"

    _starting(host, engine, "active")
    app.conf.task_always_eager = True
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert probe_runs_release_postponed() == 1
    finally:
        app.conf.task_always_eager = False
    run.refresh_from_db()
    assert run.status == "done" and run.config["waited"]["first_reason"].startswith("sim-vllm is starting")
    assert BEAT_SCHEDULE["bench-probes-release-postponed"]["task"] == "probe.release_postponed"


def _running_bench(engine):
    from sparkops.benchmarks.models import Run

    return Run.objects.create(engine=engine, params_hash="h", status="running")  # a worker's benchmark mid-run


def test_scheduled_benchmarks_and_probes_refuse_to_start_while_the_other_runs_on_their_engine(sim, make_engine):
    from sparkops.benchmarks.models import Profile, Run
    from sparkops.benchmarks.tasks import bench_profile_scheduled

    engine = make_engine(sim("vllm").url)
    probe = ProbeProfile.objects.create(name="tools", engine=engine, kind="tool")
    bench = Profile.objects.create(name="short", engine=engine, depth=0, output_tokens=8, reps=1)

    busy_probe = ProbeRun.objects.create(engine=engine, kind="tool", params_hash="h", status="running")
    with box_worker(engine.host):
        bench_profile_scheduled(bench.pk)
    refused = Run.objects.filter(profile=bench).get()
    assert refused.status == "refused" and refused.repetitions.count() == 0
    assert refused.reason == f"a probe (run {busy_probe.pk}) is running on this engine"
    assert scheduled(probe).reason == f"another probe (run {busy_probe.pk}) is running on this engine"

    ProbeRun.objects.filter(pk=busy_probe.pk).update(status="done")
    busy_bench = _running_bench(engine)
    assert scheduled(probe).reason == f"a benchmark (run {busy_bench.pk}) is running on this engine"
    with box_worker(engine.host):
        bench_profile_scheduled(bench.pk)
    again = Run.objects.filter(profile=bench).latest("created_at")
    assert (
        again.status == "refused"
        and again.reason == f"another benchmark (run {busy_bench.pk}) is running on this engine"
    )

    Run.objects.filter(pk=busy_bench.pk).update(status="done")
    assert scheduled(probe).status == "done"  # nothing running: each goes ahead
    with box_worker(engine.host):
        bench_profile_scheduled(bench.pk)
    assert Run.objects.filter(profile=bench).latest("created_at").status == "done"


def test_a_postponed_probe_released_while_a_benchmark_runs_is_refused_with_why(sim, make_engine, host):
    from sparkops.probes.schedule import probe_runs_release_postponed

    engine = make_engine(sim("vllm").url, name="sim-vllm")
    _starting(host, engine, "activating")
    profile = ProbeProfile.objects.create(name="tools", engine=engine, kind="tool")
    run = scheduled(profile)
    assert run.status == "queued"
    _starting(host, engine, "active")
    busy = _running_bench(engine)
    assert probe_runs_release_postponed() == 0
    run.refresh_from_db()
    assert run.status == "refused" and run.reason == f"a benchmark (run {busy.pk}) is running on this engine"


def test_a_run_left_running_by_a_dead_worker_is_failed_by_the_sweep(sim, make_engine):
    from datetime import timedelta

    from django.utils import timezone

    from dashboard.schedule import BEAT_SCHEDULE
    from sparkops.probes.schedule import probe_runs_sweep_stale

    engine = make_engine(sim("vllm").url)
    params = {"kind": "tool", "reps": 3, "timeout_s": 10}
    old = ProbeRun.objects.create(
        engine=engine,
        kind="tool",
        params_hash="h",
        status="running",
        config={"params": params},
        total_cases=3,
        started_at=timezone.now() - timedelta(hours=2),
    )
    fresh = ProbeRun.objects.create(
        engine=engine,
        kind="tool",
        params_hash="h",
        status="running",
        config={"params": params},
        total_cases=3,
        started_at=timezone.now(),
    )
    assert probe_runs_sweep_stale() == 1
    old.refresh_from_db()
    fresh.refresh_from_db()
    assert old.status == "failed" and "worker stopped" in old.reason and fresh.status == "running"
    assert BEAT_SCHEDULE["bench-probes-sweep-stale"]["task"] == "probe.sweep_stale"


def test_a_scheduled_probe_is_refused_while_a_benchmark_runs_on_its_engine(sim, make_engine):
    from sparkops.benchmarks.models import Run

    engine = make_engine(sim("vllm").url)
    bench = Run.objects.create(engine=engine, params_hash="h", status="running")
    profile = ProbeProfile.objects.create(name="tools", engine=engine, kind="tool")
    run = scheduled(profile)
    assert run.status == "refused" and f"a benchmark (run {bench.pk}) is running" in run.reason
