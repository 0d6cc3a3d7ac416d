"""Probe scheduling: each profile's cron in django-celery-beat (PeriodicTask + CrontabSchedule), parsed
and shown by the benchmarks' helpers; scheduled probes wait while the box is starting, like benchmarks."""

from datetime import timedelta

from django.utils import timezone

from dashboard.benchmarks.conditions import box_starting  # noqa: F401  (the benchmarks' gate, shared)
from dashboard.benchmarks.schedule import cron_set_schedule, parse_cron, profile_cron  # noqa: F401


def probe_set_schedule(*, profile, cron, enabled=True):
    """Create, update or (cron empty) remove the profile's PeriodicTask."""
    return cron_set_schedule(
        profile=profile, cron=cron, enabled=enabled, name="probe profile", task="probe.profile_scheduled"
    )


def profile_run_scheduled(*, profile, waited_for=None):
    from dashboard.benchmarks.models import Run as BenchRun

    from .models import ProbeRun
    from .services import _end, probe_run_create, probe_run_execute

    run = probe_run_create(
        engine=profile.engine, spec=profile.spec(), profile=profile, trigger=ProbeRun.Trigger.SCHEDULED
    )
    if waited_for:
        run.config["waited"] = {"reason": waited_for}
        run.save(update_fields=["config"])
    if waited_for and conditions_still(profile):
        return _end(run, ProbeRun.Status.REFUSED, f"skipped: the box was still starting after an hour ({waited_for})")
    busy = ProbeRun.objects.filter(engine=profile.engine, status=ProbeRun.Status.RUNNING).exclude(pk=run.pk).first()
    if busy is not None:
        return _end(run, ProbeRun.Status.REFUSED, f"another probe (run {busy.pk}) is running on this engine")
    bench = BenchRun.objects.filter(engine=profile.engine, status=BenchRun.Status.RUNNING).first()
    if bench is not None:  # both would measure the other's load
        return _end(run, ProbeRun.Status.REFUSED, f"a benchmark (run {bench.pk}) is running on this engine")
    return probe_run_execute(run=run)


def conditions_still(profile):
    return bool(box_starting(profile.engine))


STALE_MARGIN_S = 600


def probe_runs_sweep_stale():
    """Runs left "running" past their time budget (every case timing out, plus a margin) by a worker that
    died: failed with the reason, by a conditional UPDATE. Returns how many."""
    from .models import ProbeRun

    failed = 0
    for run in ProbeRun.objects.filter(status=ProbeRun.Status.RUNNING, started_at__isnull=False):
        params = run.config.get("params") or {}
        cases = max(run.total_cases, 2 * len(params.get("depths") or [1]) * params.get("reps", 3), 8)
        budget = params.get("timeout_s", 600) * (cases + 2) + STALE_MARGIN_S
        if run.started_at < timezone.now() - timedelta(seconds=budget):
            failed += ProbeRun.objects.filter(pk=run.pk, status=ProbeRun.Status.RUNNING).update(
                status=ProbeRun.Status.FAILED,
                finished_at=timezone.now(),
                reason="the worker stopped mid-run (no result within the run's time budget)",
            )
    return failed
