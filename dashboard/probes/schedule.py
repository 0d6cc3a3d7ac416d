"""Probe scheduling: each profile's cron in django-celery-beat (PeriodicTask + CrontabSchedule), parsed
and shown by the benchmarks' helpers; scheduled probes wait while the box is starting, like benchmarks."""

from dashboard.benchmarks.conditions import box_starting  # the benchmarks' gate, shared
from dashboard.benchmarks.schedule import cron_set_schedule, fail_overdue, profile_cron  # noqa: F401 (profile_cron: shared)


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
    if waited_for and box_starting(profile.engine):  # still starting after the task's hour of retries
        return _end(run, ProbeRun.Status.REFUSED, f"skipped: the box was still starting after an hour ({waited_for})")
    busy = ProbeRun.objects.filter(engine=profile.engine, status=ProbeRun.Status.RUNNING).exclude(pk=run.pk).first()
    if busy is not None:
        return _end(run, ProbeRun.Status.REFUSED, f"another probe (run {busy.pk}) is running on this engine")
    bench = BenchRun.objects.filter(engine=profile.engine, status=BenchRun.Status.RUNNING).first()
    if bench is not None:  # both would measure the other's load
        return _end(run, ProbeRun.Status.REFUSED, f"a benchmark (run {bench.pk}) is running on this engine")
    return probe_run_execute(run=run)


def probe_runs_sweep_stale():
    """Runs left "running" past their time budget (every case timing out, plus a margin) by a worker that
    died: failed with the reason, by a conditional UPDATE. Returns how many."""
    from .models import ProbeRun

    def budget(run):
        params = run.config.get("params") or {}
        cases = max(run.total_cases, 2 * len(params.get("depths") or [1]) * params.get("reps", 3), 8)
        return params.get("timeout_s", 600) * (cases + 2)

    return fail_overdue(ProbeRun, budget)
