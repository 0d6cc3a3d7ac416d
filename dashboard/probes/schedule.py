"""Probe scheduling: each profile's cron in django-celery-beat (PeriodicTask + CrontabSchedule), parsed
and shown by the benchmarks' helpers. A scheduled probe waits like a scheduled benchmark: a run row at
once, queued with the reason while an engine of its box is starting, released by the beat sweep."""

from dashboard.benchmarks.conditions import box_starting, engine_busy  # the benchmarks' gates, shared
from dashboard.benchmarks.schedule import (  # noqa: F401 (profile_cron: shared)
    cron_set_schedule,
    fail_overdue,
    postpone,
    profile_cron,
    release_postponed,
)


def probe_set_schedule(*, profile, cron, enabled=True):
    """Create, update or (cron empty) remove the profile's PeriodicTask."""
    return cron_set_schedule(
        profile=profile, cron=cron, enabled=enabled, name="probe profile", task="probe.profile_scheduled"
    )


def profile_run_scheduled(*, profile):
    """One scheduled run of PROFILE, here and now, or postponed (queued, saying why) while an engine of
    its box is inside its start; `probe_runs_release_postponed` releases or refuses it."""
    from .models import ProbeRun
    from .services import _end, _progress, probe_run_create, probe_run_execute

    run = probe_run_create(
        engine=profile.engine, spec=profile.spec(), profile=profile, trigger=ProbeRun.Trigger.SCHEDULED
    )
    why = box_starting(profile.engine)
    if why:
        return postpone(run, why, progress=_progress)
    busy = engine_busy(profile.engine, asking=run)
    if busy:
        return _end(run, ProbeRun.Status.REFUSED, busy)
    return probe_run_execute(run=run)


def probe_runs_release_postponed(*, now=None):
    """The postponed scheduled probe runs (the benchmarks' `release_postponed`). Returns the number released."""
    from .models import ProbeRun
    from .services import _end, _progress
    from .tasks import probe_run_execute_task

    return release_postponed(
        ProbeRun,
        execute=probe_run_execute_task,
        refuse=lambda run, reason: _end(run, ProbeRun.Status.REFUSED, reason),
        progress=_progress,
        now=now,
    )


def probe_runs_sweep_stale():
    """Runs left "running" past their time budget (every case timing out, plus a margin) by a worker that
    died: failed with the reason, by a conditional UPDATE. Returns how many."""
    from .models import ProbeRun

    def budget(run):
        params = run.config.get("params") or {}
        cases = max(run.total_cases, 2 * len(params.get("depths") or [1]) * params.get("reps", 3), 8)
        return params.get("timeout_s", 600) * (cases + 2)

    return fail_overdue(ProbeRun, budget)
