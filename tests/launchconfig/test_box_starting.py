"""Scheduled benchmarks wait while an engine of their box is inside its start (real simulated
systemd, real engines over HTTP, the box's own poller storing what it read)."""

import time

import pytest

from tests.simbox import point_collectors_at
from tests.waiting import HAND_TICKED

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def cold_box(tmp_path, settings, monkeypatch, db):
    from django.conf import settings as django_settings

    from dashboard.models import Engine, Host
    from simulator.client import Simulation

    # The box boots warm (no 6 s of compilers before the first test): each test makes the start it
    # watches cold with sim.cold(). box_starting counts an answer as after a start only from 1 s past
    # it (systemd's whole-second timestamps), so both engines load for 1.1 s: their first answer, and
    # so the first tick's, comes after that second.
    engines = ["vllm:nemotron,cold_seconds=6,warm_cache=1,load_seconds=1.1", "llamacpp:lla,load_seconds=1.1"]
    with Simulation(engines=engines, state_dir=tmp_path / "sim", ready_timeout=30) as sim:
        point_collectors_at(sim, settings, monkeypatch)
        host = Host.objects.create(name=django_settings.SPARKOPS_HOST_NAME)
        made = {
            name: Engine.objects.create(name=name, kind=kind, url=sim.url(name), host=host, unit=sim.unit(name))
            for name, kind in (("nemotron", "vllm"), ("lla", "llamacpp"))
        }
        yield sim, made


def _poller(engines):
    from sparkops.poller.resident import ResidentPoller

    return ResidentPoller(
        next(iter(engines.values())).host.name, poll_interval=HAND_TICKED, duties={}, flush_interval=0
    )


def _fresh(engine):
    from dashboard.models import Engine

    return Engine.objects.select_related("host").get(pk=engine.pk)


def test_a_scheduled_run_waits_while_a_neighbour_cold_starts_then_runs_and_says_it_waited(
    cold_box, django_capture_on_commit_callbacks, client, viewer
):
    from sparkops.benchmarks.models import Profile, Run
    from sparkops.benchmarks.schedule import profile_run_scheduled, runs_release_postponed
    from sparkops.celery import app
    from sparkops.measured.conditions import box_starting

    sim, engines = cold_box
    poller = _poller(engines)
    poller.metrics_tick()
    assert box_starting(_fresh(engines["lla"])) is None  # both up: nothing to wait for
    Profile.objects.create(name="lla-short", engine=engines["lla"], depth=0, output_tokens=8, reps=1)

    sim.cold("nemotron")
    sim.restart("nemotron")  # a cold start: 6 s of compilers before it answers
    poller.metrics_tick()
    why = box_starting(_fresh(engines["lla"]))
    # Its readiness helper runs: the unit is activating (start-post), as systemd holds it.
    assert why and why.startswith("nemotron is starting: its unit nemotron.service is activating (start-post) since ")
    assert box_starting(_fresh(engines["nemotron"])) == why  # the engine's own start counts too

    run = profile_run_scheduled(profile=_fresh(engines["lla"]).bench_profiles.get())
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED and run.reason.startswith("postponed: nemotron is starting")
    client.force_login(viewer)
    assert "postponed: nemotron is starting" in client.get(f"/bench/runs/{run.pk}/").content.decode()
    assert run.repetitions.count() == 0 and not run.tainted and run.started_at is None
    assert runs_release_postponed() == 0  # still starting: it stays queued
    assert Run.objects.get(pk=run.pk).status == Run.Status.QUEUED

    deadline = time.monotonic() + 30
    while box_starting(_fresh(engines["lla"])) is not None:
        assert time.monotonic() < deadline, "nemotron never finished its start"
        poller.metrics_tick()
        time.sleep(0.3)
    app.conf.task_always_eager = True  # the released run executes here, as the box's worker would
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert runs_release_postponed() == 1
        with django_capture_on_commit_callbacks(execute=True):
            assert runs_release_postponed() == 0  # released once
    finally:
        app.conf.task_always_eager = False
    run.refresh_from_db()
    assert run.status == Run.Status.DONE, run.reason
    assert run.repetitions.filter(ok=True).count() == 1 and run.reason == ""
    assert run.config["waited"]["first_reason"] == why and run.config["waited"]["until"]
    assert run.config["params"]["reps"] == 1  # the measured configuration is kept beside it
    from sparkops.benchmarks.services import run_summary

    assert run_summary(run)["waited"]["first_reason"] == why
    page = client.get(f"/bench/runs/{run.pk}/").content.decode()
    assert 'id="run-waited"' in page and "Waited for its box from" in page and why in page


def test_a_run_still_waiting_after_the_schedule_expiry_is_refused_with_why(cold_box):
    from datetime import timedelta

    from django.utils import timezone

    from sparkops.benchmarks.models import Profile, Run
    from sparkops.benchmarks.schedule import profile_run_scheduled, runs_release_postponed
    from sparkops.measured.services import SCHEDULE_EXPIRES_S

    sim, engines = cold_box
    poller = _poller(engines)
    poller.metrics_tick()
    Profile.objects.create(name="lla-short", engine=engines["lla"], depth=0, output_tokens=8, reps=1)
    sim.cold("nemotron")
    sim.restart("nemotron")
    poller.metrics_tick()
    run = profile_run_scheduled(profile=Profile.objects.select_related("engine__host").get())
    assert run.status == Run.Status.QUEUED
    later = timezone.now() + timedelta(seconds=SCHEDULE_EXPIRES_S + 1)
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(seconds=SCHEDULE_EXPIRES_S + 1))
    assert runs_release_postponed(now=later - timedelta(seconds=SCHEDULE_EXPIRES_S + 1)) == 0
    run.refresh_from_db()
    assert run.status == Run.Status.REFUSED
    assert run.reason.startswith("skipped: the box was still starting after 60 min (nemotron is starting")


def test_an_engine_active_but_silent_past_its_timeout_is_not_a_start(cold_box):
    from datetime import timedelta

    from django.utils import timezone

    from sparkops.measured.conditions import box_starting

    sim, engines = cold_box
    poller = _poller(engines)
    poller.metrics_tick()
    sim.cold("nemotron")
    sim.restart("nemotron")
    poller.metrics_tick()
    lla = _fresh(engines["lla"])
    assert box_starting(lla) is not None
    # Twenty minutes on, a unit still without an answer is "active but not answering" (an alert), not a start
    # (unless systemd still calls it activating, which it does until TimeoutStartSec fails it).
    units = (lla.host.latest or {}).get("units") or {}
    if units["nemotron.service"]["ActiveState"] == "active":
        assert box_starting(lla, now=timezone.now() + timedelta(minutes=20)) is None


def test_a_scheduled_probe_waits_as_a_queued_run_then_is_released_once_and_runs(
    cold_box, django_capture_on_commit_callbacks, client, viewer
):
    from sparkops.celery import app
    from sparkops.measured.conditions import box_starting
    from sparkops.probes import schedule
    from sparkops.probes.models import ProbeProfile, ProbeRun
    from sparkops.probes.tasks import probe_profile_scheduled

    sim, engines = cold_box
    poller = _poller(engines)
    poller.metrics_tick()
    profile = ProbeProfile.objects.create(name="lla-tools", engine=engines["lla"], kind="tool", timeout_s=30)
    sim.cold("nemotron")
    sim.restart("nemotron")
    poller.metrics_tick()
    why = box_starting(_fresh(engines["lla"]))
    assert why and why.startswith("nemotron is starting")

    probe_profile_scheduled(profile.pk)  # what beat sends; it returns at once, leaving a row that says why it waits
    (run,) = ProbeRun.objects.filter(profile=profile)
    assert run.status == ProbeRun.Status.QUEUED and run.trigger == ProbeRun.Trigger.SCHEDULED
    assert run.reason.startswith("postponed: nemotron is starting") and run.started_at is None
    assert run.config["waited"]["first_reason"] == why and run.cases.count() == 0
    client.force_login(viewer)
    assert "postponed: nemotron is starting" in client.get(f"/probes/runs/{run.pk}/").content.decode()
    probe_runs_release_postponed = schedule.probe_runs_release_postponed  # the beat sweep's probe half
    assert probe_runs_release_postponed() == 0  # still starting: it stays queued
    assert ProbeRun.objects.get(pk=run.pk).status == ProbeRun.Status.QUEUED

    deadline = time.monotonic() + 30
    while box_starting(_fresh(engines["lla"])) is not None:
        assert time.monotonic() < deadline, "nemotron never finished its start"
        poller.metrics_tick()
        time.sleep(0.3)
    app.conf.task_always_eager = True  # the released run executes here, as the box's worker would
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert probe_runs_release_postponed() == 1
        with django_capture_on_commit_callbacks(execute=True):
            assert probe_runs_release_postponed() == 0  # released once
    finally:
        app.conf.task_always_eager = False
    run.refresh_from_db()
    assert run.status == ProbeRun.Status.DONE, run.reason
    assert run.reason == "" and run.cases.filter(ok=True).count() == run.total_cases > 0
    assert run.config["waited"]["first_reason"] == why and run.config["waited"]["until"]
    page = client.get(f"/probes/runs/{run.pk}/").content.decode()
    assert 'id="run-waited"' in page and "Waited for its box from" in page and why in page


def test_a_scheduled_probe_still_waiting_after_the_hour_is_kept_refused_with_why(cold_box):
    from datetime import timedelta

    from django.utils import timezone

    from sparkops.measured.services import SCHEDULE_EXPIRES_S
    from sparkops.probes.models import ProbeProfile, ProbeRun
    from sparkops.probes.schedule import probe_runs_release_postponed
    from sparkops.probes.tasks import probe_profile_scheduled

    sim, engines = cold_box
    poller = _poller(engines)
    poller.metrics_tick()
    profile = ProbeProfile.objects.create(name="lla-tools", engine=engines["lla"], kind="tool")
    sim.cold("nemotron")
    sim.restart("nemotron")
    poller.metrics_tick()
    probe_profile_scheduled(profile.pk)
    (run,) = ProbeRun.objects.filter(profile=profile)
    assert run.status == ProbeRun.Status.QUEUED
    ProbeRun.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(seconds=SCHEDULE_EXPIRES_S + 1))
    assert probe_runs_release_postponed() == 0
    run.refresh_from_db()
    assert run.status == ProbeRun.Status.REFUSED and run.finished_at is not None and run.cases.count() == 0
    assert run.reason.startswith("skipped: the box was still starting after 60 min (nemotron is starting")
