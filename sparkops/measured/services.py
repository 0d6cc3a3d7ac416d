"""The lifecycle of measured runs (benchmark and probe runs) around their execution: a profile's
cron in django-celery-beat, a scheduled run that waits while its box starts, the sweep that
releases or refuses the waiting ones, and the sweep that fails runs whose worker died. Each kind
passes its own model, Celery task and executor; the static sweeps are in dashboard/schedule.py."""

import json
from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol, TypedDict, TypeVar

from celery.schedules import crontab
from django import forms
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from sparkops.measured.conditions import box_starting, conditions_snapshot, engine_busy, taint_reasons
from sparkops.poller.fleet import box_reachable

from .models import POSTPONED, MeasuredProfile, MeasuredRun

Run = TypeVar("Run", bound=MeasuredRun)
# A kind's run model (benchmarks.Run, probes.ProbeRun): the core names none of its kinds, and the
# abstract MeasuredRun has no `trigger` or `engine` field to query by.
RunModel = Any
# A kind's profile where its own `schedule` field is saved by name (the abstract model has none).
ProfileModel = Any


class RunTask(Protocol):
    """A kind's Celery task that executes a run by its id."""

    def apply_async(self, *, args: list[int], queue: str) -> object: ...


class ScheduleInitial(TypedDict):
    """A profile form's schedule fields (MeasuredProfileForm's keywords)."""

    cron: str
    schedule_enabled: bool


class SetSchedule(Protocol):
    """A kind's `profile_set_schedule`."""

    def __call__(self, *, profile: Any, cron: str, enabled: bool) -> object: ...


STALE_MARGIN_S = 600
SCHEDULE_EXPIRES_S = 3600  # a scheduled run that could not start within an hour is skipped, not piled up


def parse_cron(text: str | None) -> dict[str, str]:
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


def cron_set_schedule(
    *, profile: ProfileModel, cron: str | None, enabled: bool, name: str, task: str
) -> PeriodicTask | None:
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


def profile_save(*, form: "forms.ModelForm[Any]", user: User, set_schedule: SetSchedule) -> MeasuredProfile:
    """Save a profile's valid FORM (USER its creator the first time) and its cron (SET_SCHEDULE, the
    kind's), in one transaction."""
    with transaction.atomic():
        profile = form.save(commit=False)
        if profile.created_by_id is None:
            profile.created_by = user
        profile.save()
        set_schedule(profile=profile, cron=form.cleaned_data["cron"], enabled=form.cleaned_data["schedule_enabled"])
    return profile


def schedule_initial(profile: MeasuredProfile) -> ScheduleInitial:
    """A profile form's schedule fields as PROFILE has them: its cron and whether it is enabled."""
    enabled = profile.schedule.enabled if profile.schedule else True
    return {"cron": profile_cron(profile), "schedule_enabled": enabled}


def profile_cron(profile: MeasuredProfile) -> str:
    """PROFILE's cron as text ("" when it has none)."""
    task = profile.schedule
    if task is None or task.crontab is None:
        return ""
    c = task.crontab
    return " ".join((c.minute, c.hour, c.day_of_month, c.month_of_year, c.day_of_week))


def run_row(model: RunModel, *, engine: Any, spec: Any, profile: Any, trigger: str, user: Any, **fields: Any) -> Any:
    """A queued run of MODEL (a kind's run model) carrying SPEC's full parameters and their hash,
    with the kind's own FIELDS; executed later by a worker or the CLI."""
    return model.objects.create(
        profile=profile,
        engine=engine,
        params_hash=spec.params_hash(),
        trigger=trigger,
        created_by=user,
        config={"params": spec.as_dict()},
        **fields,
    )


def summary_head(run: MeasuredRun, **first: object) -> dict[str, Any]:
    """What `sparkops bench|probe run --json` prints first of every run: its id (then FIRST, the kind's
    own leading keys), its status and why, its engine and its parameters' hash."""
    return {
        "run": run.pk,
        **first,
        "status": run.status,
        "reason": run.reason,
        "engine": run.engine.name,
        "params_hash": run.params_hash,
    }


def queue_on_box(run: Run, task: RunTask) -> Run:
    """Send TASK (a Celery task taking the run's id) to the worker of RUN's engine's own box once the
    transaction commits: measured over loopback there, TTFT is the engine's, not the network's.
    Whoever creates RUN asks `fleet.require_reachable` first: a refused run leaves no row."""
    queue = run.engine.host.queue
    transaction.on_commit(lambda: task.apply_async(args=[run.pk], queue=queue))
    return run


def close_window(
    run: MeasuredRun, before: Mapping[str, Any], *, partner_ids: Collection[int] = (), own_alert: str | None = None
) -> None:
    """End RUN's measured window: its finish time, its conditions at start (BEFORE) and now, and its
    taint, what in that window could have moved its figures. An alert of OWN_ALERT's rule is no taint:
    it is the alert the run itself may resolve."""
    after = conditions_snapshot(engine=run.engine, partner_ids=partner_ids)
    run.finished_at = timezone.now()
    run.conditions = {"start": before, "end": after}
    reasons = taint_reasons(engine=run.engine, before=before, after=after, start=run.started_at, end=run.finished_at)
    run.taint_reasons = [r for r in reasons if own_alert is None or not r.startswith(f"alert {own_alert} ")]
    run.tainted = bool(run.taint_reasons)


def every_request_failed(errors: Mapping[str, int]) -> str:
    """The reason of a run none of whose requests answered: ERRORS counted by bucket."""
    return "every request failed: " + ", ".join(f"{k} ×{v}" for k, v in errors.items())


def run_scheduled(run: Run, *, execute: RunTask) -> Run:
    """A just-created scheduled RUN sent to its box's worker now (EXECUTE, the kind's Celery task taking
    the run's id: beat's message is taken by any worker, the run is measured on its own box), or
    postponed while an engine of its box is inside its start (`conditions.box_starting`): queued with
    the reason, released by `release_postponed` once the starts are over. Refused when a benchmark or
    probe runs on its engine, and skipped with the reason when its box's worker stopped reporting
    (`fleet.box_reachable`)."""
    reachable, gone = box_reachable(run.engine.host)
    if not reachable:
        return run.refuse(f"skipped: {gone}")
    why = box_starting(run.engine)
    if why:
        return run.postpone(why)
    busy = engine_busy(run.engine, asking=run)
    if busy:
        return run.refuse(busy)
    return queue_on_box(run, execute)


def release_postponed(model: RunModel, *, execute: RunTask, now: datetime | None = None) -> int:
    """Every postponed scheduled run of MODEL: released to its box's worker (EXECUTE, a Celery task
    taking the run's id) when its box is no longer starting, claimed by a conditional UPDATE so two
    sweeps release it once; postponed again with the current reason; refused once it has waited
    SCHEDULE_EXPIRES_S, or when a benchmark or probe runs on its engine at release
    (`conditions.engine_busy`); skipped with the reason when its box's worker stopped reporting
    (never queued for it to find later). Returns the number released."""
    now = now or timezone.now()
    released = 0
    rows = model.objects.filter(
        status=model.Status.QUEUED, trigger=model.Trigger.SCHEDULED, reason__startswith=POSTPONED
    )
    for run in rows.select_related("engine__host"):
        reachable, gone = box_reachable(run.engine.host)
        if not reachable:
            run.refuse(f"skipped: {gone}")
            continue
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


def fail_overdue(model: RunModel) -> int:
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
