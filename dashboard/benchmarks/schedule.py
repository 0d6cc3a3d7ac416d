"""Benchmark scheduling. Each profile's cron lives in the database (django-celery-beat
PeriodicTask + CrontabSchedule, editable in the UI); the static sweep of runs whose worker
died is in dashboard/schedule.py."""

import json
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

STALE_MARGIN_S = 600
SCHEDULE_EXPIRES_S = 3600  # a scheduled run that could not start within an hour is skipped, not piled up
POSTPONED = "postponed: "  # the start of a postponed run's reason (what the release sweep looks for)


def parse_cron(text):
    """'m h dom mon dow' -> dict of CrontabSchedule fields; ValueError with a readable reason."""
    parts = (text or "").split()
    if len(parts) != 5:
        raise ValueError("Use five cron fields: minute hour day-of-month month day-of-week, e.g. '0 3 * * *'.")
    from celery.schedules import crontab

    fields = dict(zip(("minute", "hour", "day_of_month", "month_of_year", "day_of_week"), parts))
    try:
        crontab(**fields)
    except Exception as exc:  # celery raises ValueError or its own ParseException
        raise ValueError(f"Not a valid cron expression: {exc}") from None
    return fields


def profile_set_schedule(*, profile, cron, enabled=True):
    """Create, update or (cron empty) remove the profile's PeriodicTask."""
    return cron_set_schedule(
        profile=profile, cron=cron, enabled=enabled, name="bench profile", task="bench.profile_scheduled"
    )


def cron_set_schedule(*, profile, cron, enabled, name, task):
    """Create, update or (cron empty) remove PROFILE's PeriodicTask (its `schedule` field): TASK
    called with [profile.pk] on the cron, named "NAME <pk>". Benchmark and probe profiles share it."""
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    if not (cron or "").strip():
        if profile.schedule_id:
            periodic = profile.schedule
            profile.schedule = None
            profile.save(update_fields=["schedule"])
            periodic.delete()
        return None
    fields = parse_cron(cron)
    crontab, _ = CrontabSchedule.objects.get_or_create(**fields, timezone="UTC")
    periodic = profile.schedule or PeriodicTask(name=f"{name} {profile.pk}", task=task)
    periodic.crontab, periodic.interval, periodic.enabled = crontab, None, enabled
    periodic.args, periodic.expire_seconds = json.dumps([profile.pk]), SCHEDULE_EXPIRES_S
    periodic.save()
    if profile.schedule_id != periodic.pk:
        profile.schedule = periodic
        profile.save(update_fields=["schedule"])
    return periodic


def profile_cron(profile):
    task = profile.schedule
    if task is None or task.crontab is None:
        return ""
    c = task.crontab
    return " ".join((c.minute, c.hour, c.day_of_month, c.month_of_year, c.day_of_week))


def profile_run_scheduled(*, profile):
    """One scheduled run of PROFILE, here and now, or postponed while an engine of its box is
    inside its start (`conditions.box_starting`): queued with the reason, released by
    `runs_release_postponed` once the starts are over."""
    from .conditions import box_starting
    from .models import Run
    from .services import run_create

    run = run_create(engine=profile.engine, spec=profile.spec(), profile=profile, trigger=Run.Trigger.SCHEDULED)
    why = box_starting(profile.engine)
    if why:
        return run_postpone(run=run, why=why)
    return _run_now(run)


def _run_now(run):
    from .conditions import engine_busy
    from .services import run_execute, run_refuse

    busy = engine_busy(run.engine, asking=run)
    if busy:
        return run_refuse(run=run, reason=busy)
    return run_execute(run=run)


def run_postpone(*, run, why):
    from .services import _progress

    return postpone(run, why, progress=_progress)


def postpone(run, why, *, progress):
    """Keep RUN (a benchmark or probe run) queued, saying why it waits; the first reason and time stay in
    `config["waited"]`. PROGRESS(run) tells the run's page."""
    waited = run.config.get("waited") or {"since": timezone.now().isoformat(), "first_reason": why}
    run.config = {**run.config, "waited": {**waited, "reason": why}}
    run.reason = f"{POSTPONED}{why}; scheduled runs wait until the box's engines have started"
    run.save(update_fields=["config", "reason"])
    progress(run)
    return run


def runs_release_postponed(*, now=None):
    """The postponed scheduled benchmark runs (see `release_postponed`). Returns the number released."""
    from .models import Run
    from .services import _progress, run_refuse
    from .tasks import bench_run_execute

    return release_postponed(
        Run,
        execute=bench_run_execute,
        refuse=lambda run, reason: run_refuse(run=run, reason=reason),
        progress=_progress,
        now=now,
    )


def release_postponed(model, *, execute, refuse, progress, now=None):
    """Every postponed scheduled run of MODEL (benchmark and probe runs share this): released to its
    box's worker (EXECUTE, a Celery task taking the run's id) when its box is no longer starting,
    claimed by a conditional UPDATE so two sweeps release it once; postponed again with the current
    reason; refused (REFUSE(run, reason)) once it has waited SCHEDULE_EXPIRES_S, or when a benchmark or
    probe runs on its engine at release (`conditions.engine_busy`). Returns the number released."""
    from .conditions import box_starting, engine_busy

    now = now or timezone.now()
    released = 0
    rows = model.objects.filter(
        status=model.Status.QUEUED, trigger=model.Trigger.SCHEDULED, reason__startswith=POSTPONED
    )
    for run in rows.select_related("engine__host"):
        why = box_starting(run.engine, now=now)
        if why and (now - run.created_at).total_seconds() > SCHEDULE_EXPIRES_S:
            refuse(run, f"skipped: the box was still starting after {SCHEDULE_EXPIRES_S // 60} min ({why})")
        elif why:
            if why != (run.config.get("waited") or {}).get("reason"):
                postpone(run, why, progress=progress)
        elif busy := engine_busy(run.engine, asking=run):
            refuse(run, busy)
        else:
            waited = {**(run.config.get("waited") or {}), "until": now.isoformat()}
            claimed = model.objects.filter(pk=run.pk, status=model.Status.QUEUED, reason=run.reason).update(
                reason="", config={**run.config, "waited": waited}
            )
            if claimed == 1:
                released += 1
                queue = run.engine.host.queue
                transaction.on_commit(lambda pk=run.pk, q=queue: execute.apply_async(args=[pk], queue=q))
    return released


def runs_sweep_stale():
    from .models import Run

    def budget(run):
        params = run.config.get("params") or {}
        arrivals = (run.config.get("rate") or {}).get("duration_s", 0)  # a rate run sends for its whole duration
        return params.get("timeout_s", 600) * (params.get("reps", 3) + 3) + arrivals

    return fail_overdue(Run, budget)


def fail_overdue(model, budget_s):
    """MODEL's rows left "running" past BUDGET_S(row) + STALE_MARGIN_S seconds by a worker that died:
    failed with the reason, by a conditional UPDATE. Returns how many. Benchmark and probe runs share it."""
    failed = 0
    for run in model.objects.filter(status=model.Status.RUNNING, started_at__isnull=False):
        if run.started_at < timezone.now() - timedelta(seconds=budget_s(run) + STALE_MARGIN_S):
            failed += model.objects.filter(pk=run.pk, status=model.Status.RUNNING).update(
                status=model.Status.FAILED,
                finished_at=timezone.now(),
                reason="the worker stopped mid-run (no result within the run's time budget)",
            )
    return failed
