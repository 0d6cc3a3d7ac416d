"""Benchmark scheduling. Each profile's cron lives in the database (django-celery-beat
PeriodicTask + CrontabSchedule, editable in the UI); the lifecycle of a scheduled run (waiting
for its box, release, the stale sweep) is every measured run's, in dashboard/measured/services.py;
the static sweeps themselves are in dashboard/schedule.py."""

from dashboard.measured.services import cron_set_schedule, fail_overdue, release_postponed, run_scheduled

from .models import Run
from .tasks import bench_run_execute


def profile_set_schedule(*, profile, cron, enabled=True):
    """Create, update or (cron empty) remove the profile's PeriodicTask."""
    return cron_set_schedule(
        profile=profile, cron=cron, enabled=enabled, name="bench profile", task="bench.profile_scheduled"
    )


def profile_run_scheduled(*, profile):
    """One scheduled run of PROFILE, here and now, or postponed while an engine of its box is
    inside its start: queued with the reason, released by `runs_release_postponed` once the
    starts are over."""
    from .services import run_create, run_execute

    run = run_create(engine=profile.engine, spec=profile.spec(), profile=profile, trigger=Run.Trigger.SCHEDULED)
    return run_scheduled(run, execute=run_execute)


def runs_release_postponed(*, now=None):
    """The postponed scheduled benchmark runs, released, postponed again or refused. Returns the number released."""

    return release_postponed(Run, execute=bench_run_execute, now=now)


def runs_sweep_stale():
    """Benchmark runs whose worker died mid-run, failed. Returns how many."""

    return fail_overdue(Run)
