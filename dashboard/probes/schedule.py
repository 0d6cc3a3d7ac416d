"""Probe scheduling: each profile's cron in django-celery-beat (PeriodicTask + CrontabSchedule). A
scheduled probe waits like a scheduled benchmark (the lifecycle of every measured run, in
dashboard/measured/services.py): a run row at once, queued with the reason while an engine of its
box is starting, released by the beat sweep."""

from dashboard.measured.services import cron_set_schedule, fail_overdue, release_postponed, run_scheduled

from .models import ProbeRun
from .tasks import probe_run_execute_task


def probe_set_schedule(*, profile, cron, enabled=True):
    """Create, update or (cron empty) remove the profile's PeriodicTask."""
    return cron_set_schedule(
        profile=profile, cron=cron, enabled=enabled, name="probe profile", task="probe.profile_scheduled"
    )


def profile_run_scheduled(*, profile):
    """One scheduled run of PROFILE, here and now, or postponed (queued, saying why) while an engine of
    its box is inside its start; `probe_runs_release_postponed` releases or refuses it."""
    from .services import probe_run_create, probe_run_execute

    run = probe_run_create(
        engine=profile.engine, spec=profile.spec(), profile=profile, trigger=ProbeRun.Trigger.SCHEDULED
    )
    return run_scheduled(run, execute=probe_run_execute)


def probe_runs_release_postponed(*, now=None):
    """The postponed scheduled probe runs, released, postponed again or refused. Returns the number released."""

    return release_postponed(ProbeRun, execute=probe_run_execute_task, now=now)


def probe_runs_sweep_stale():
    """Probe runs whose worker died mid-run (no result within `ProbeRun.stale_budget_s`), failed. Returns how many."""

    return fail_overdue(ProbeRun)
