"""The lifecycle of measured runs (benchmark and probe runs) around their execution: a profile's
cron in django-celery-beat, a scheduled run that waits while its box starts, the sweep that
releases or refuses the waiting ones, and the sweep that fails runs whose worker died. Each kind
passes its own model, Celery task and executor; the static sweeps are in dashboard/schedule.py."""

import json
from datetime import timedelta

from celery.schedules import crontab
from django.db import transaction
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from dashboard.benchmarks.conditions import box_starting, conditions_snapshot, engine_busy, taint_reasons

from .models import POSTPONED

STALE_MARGIN_S = 600
SCHEDULE_EXPIRES_S = 3600  # a scheduled run that could not start within an hour is skipped, not piled up


def parse_cron(text):
    """'m h dom mon dow' -> dict of CrontabSchedule fields; ValueError with a readable reason."""
    parts = (text or "").split()
    if len(parts) != 5:
        raise ValueError("Use five cron fields: minute hour day-of-month month day-of-week, e.g. '0 3 * * *'.")

    fields = dict(zip(("minute", "hour", "day_of_month", "month_of_year", "day_of_week"), parts))
    try:
        crontab(**fields)
    except Exception as exc:  # celery raises ValueError or its own ParseException
        raise ValueError(f"Not a valid cron expression: {exc}") from None
    return fields


def cron_set_schedule(*, profile, cron, enabled, name, task):
    """Create, update or (cron empty) remove PROFILE's PeriodicTask (its `schedule` field): TASK
    called with [profile.pk] on the cron, named "NAME <pk>"."""

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


def profile_save(*, form, user, set_schedule):
    """Save a profile's valid FORM (USER its creator the first time) and its cron (SET_SCHEDULE, the
    kind's), in one transaction."""
    with transaction.atomic():
        profile = form.save(commit=False)
        if profile.created_by_id is None:
            profile.created_by = user
        profile.save()
        set_schedule(profile=profile, cron=form.cleaned_data["cron"], enabled=form.cleaned_data["schedule_enabled"])
    return profile


def schedule_initial(profile):
    """A profile form's schedule fields as PROFILE has them: its cron and whether it is enabled."""
    enabled = profile.schedule.enabled if profile.schedule else True
    return {"cron": profile_cron(profile), "schedule_enabled": enabled}


def profile_cron(profile):
    """PROFILE's cron as text ("" when it has none)."""
    task = profile.schedule
    if task is None or task.crontab is None:
        return ""
    c = task.crontab
    return " ".join((c.minute, c.hour, c.day_of_month, c.month_of_year, c.day_of_week))


def queue_on_box(run, task):
    """Send TASK (a Celery task taking the run's id) to the worker of RUN's engine's own box once the
    transaction commits: measured over loopback there, TTFT is the engine's, not the network's."""
    queue = run.engine.host.queue
    transaction.on_commit(lambda: task.apply_async(args=[run.pk], queue=queue))
    return run


def close_window(run, before, *, partner_ids=(), own_alert=None):
    """End RUN's measured window: its finish time, its conditions at start (BEFORE) and now, and its
    taint, what in that window could have moved its figures. An alert of OWN_ALERT's rule is no taint:
    it is the alert the run itself may resolve."""
    after = conditions_snapshot(engine=run.engine, partner_ids=partner_ids)
    run.finished_at = timezone.now()
    run.conditions = {"start": before, "end": after}
    reasons = taint_reasons(engine=run.engine, before=before, after=after, start=run.started_at, end=run.finished_at)
    run.taint_reasons = [r for r in reasons if own_alert is None or not r.startswith(f"alert {own_alert} ")]
    run.tainted = bool(run.taint_reasons)


def every_request_failed(errors):
    """The reason of a run none of whose requests answered: ERRORS counted by bucket."""
    return "every request failed: " + ", ".join(f"{k} ×{v}" for k, v in errors.items())


def run_scheduled(run, *, execute):
    """A just-created scheduled RUN, here and now (EXECUTE(run=run)), or postponed while an engine of
    its box is inside its start (`conditions.box_starting`): queued with the reason, released by
    `release_postponed` once the starts are over. Refused when a benchmark or probe runs on its engine."""
    why = box_starting(run.engine)
    if why:
        return run.postpone(why)
    busy = engine_busy(run.engine, asking=run)
    if busy:
        return run.refuse(busy)
    return execute(run=run)


def release_postponed(model, *, execute, now=None):
    """Every postponed scheduled run of MODEL: released to its box's worker (EXECUTE, a Celery task
    taking the run's id) when its box is no longer starting, claimed by a conditional UPDATE so two
    sweeps release it once; postponed again with the current reason; refused once it has waited
    SCHEDULE_EXPIRES_S, or when a benchmark or probe runs on its engine at release
    (`conditions.engine_busy`). Returns the number released."""
    now = now or timezone.now()
    released = 0
    rows = model.objects.filter(
        status=model.Status.QUEUED, trigger=model.Trigger.SCHEDULED, reason__startswith=POSTPONED
    )
    for run in rows.select_related("engine__host"):
        why = box_starting(run.engine, now=now)
        if why and (now - run.created_at).total_seconds() > SCHEDULE_EXPIRES_S:
            run.refuse(f"skipped: the box was still starting after {SCHEDULE_EXPIRES_S // 60} min ({why})")
        elif why:
            if why != (run.config.get("waited") or {}).get("reason"):
                run.postpone(why)
        elif busy := engine_busy(run.engine, asking=run):
            run.refuse(busy)
        else:
            waited = {**(run.config.get("waited") or {}), "until": now.isoformat()}
            claimed = model.objects.filter(pk=run.pk, status=model.Status.QUEUED, reason=run.reason).update(
                reason="", config={**run.config, "waited": waited}
            )
            if claimed == 1:
                released += 1
                queue_on_box(run, execute)
    return released


def fail_overdue(model):
    """MODEL's rows left "running" past their `stale_budget_s()` + STALE_MARGIN_S seconds by a worker
    that died: failed with the reason, by a conditional UPDATE. Returns how many."""
    failed = 0
    for run in model.objects.filter(status=model.Status.RUNNING, started_at__isnull=False):
        if run.started_at < timezone.now() - timedelta(seconds=run.stale_budget_s() + STALE_MARGIN_S):
            failed += model.objects.filter(pk=run.pk, status=model.Status.RUNNING).update(
                status=model.Status.FAILED,
                finished_at=timezone.now(),
                reason="the worker stopped mid-run (no result within the run's time budget)",
            )
    return failed
