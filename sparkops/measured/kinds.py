"""A measured-run kind: what one kind of measured work (benchmarks, quality probes) declares so that
the core serves it without importing it: its Celery tasks, its profiles' cron, the scheduled run's
wait for its box, the release and stale sweeps, the queueing of a run, the pages and the CLI.

Each kind's package builds one `Kind` in its `kind.py` from its own models and names its services by
dotted path: they import the kind's tasks, which are built from the Kind, so a path keeps that a
line instead of a circle. A third kind is a `Kind(...)` and its spec, session and execution.

Its Celery tasks are thin (load by id, call the kind's service), made once per kind under the names
beat rows store. No retries: a failed run is a result to keep, and a scheduled run that meets a
starting box waits as a queued row (see `Kind.run_scheduled`), not a retry."""

from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from celery import shared_task
from django.utils.module_loading import import_string
from django_celery_beat.models import PeriodicTask

from sparkops.poller.fleet import require_reachable

from .models import MeasuredRun
from .registry import KINDS
from .services import cron_set_schedule, fail_overdue, queue_on_box, release_postponed, run_scheduled


@dataclass(frozen=True, eq=False)
class Kind:
    """LABEL names its Celery tasks ("LABEL.run_execute", "LABEL.profile_scheduled",
    "LABEL.release_postponed", "LABEL.sweep_stale": beat rows store these) and its profiles'
    PeriodicTasks ("LABEL profile <pk>"); NAMESPACE is its URL namespace and template folder; WHAT
    names one of its runs in a sentence ("a benchmark (run 7) is running on this engine")."""

    label: str
    namespace: str
    what: str
    # The kind's models. Any: each has its own fields (engine, trigger, schedule) the abstract ones lack.
    profile_model: Any
    run_model: Any
    # Dotted paths of the kind's services: create(*, engine, spec, profile, trigger, user) -> a queued
    # run; execute(*, run) -> the run, ended; summary(run) -> what `--json` prints.
    create: str
    execute: str
    summary: str
    noun: str = "Profile"  # "Profile Nightly saved." on the pages
    run_noun: str = "Run"  # "Run 7 queued."
    also_stale: str = ""  # another sweep the stale task runs (a dotted path of a function without arguments)

    def __post_init__(self) -> None:
        KINDS[self.label] = self

    @cached_property
    def tasks(self) -> "KindTasks":
        """The kind's Celery tasks, made (and registered under their names) once."""
        return kind_tasks(self)

    def run_create(self, **kwargs: Any) -> Any:
        """A queued run of the kind (its `create` service)."""
        return import_string(self.create)(**kwargs)

    def run_execute(self, *, run: MeasuredRun) -> MeasuredRun:
        """RUN executed end to end (its `execute` service)."""
        result: MeasuredRun = import_string(self.execute)(run=run)
        return result

    def run_summary(self, run: MeasuredRun) -> dict[str, Any]:
        """RUN as `sparkops LABEL run --json` prints it."""
        summary: dict[str, Any] = import_string(self.summary)(run)
        return summary

    def enqueue(self, *, profile: Any, user: Any = None, trigger: str | None = None) -> Any:
        """Queue a run of PROFILE on the worker of the engine's own box (after commit); `BoxUnreachable`
        when that worker stopped reporting, and no run is made."""
        require_reachable(profile.engine.host)
        run = self.run_create(
            engine=profile.engine,
            spec=profile.spec(),
            profile=profile,
            trigger=trigger or self.run_model.Trigger.MANUAL,
            user=user,
        )
        return queue_on_box(run, self.tasks.run_execute)

    def set_schedule(self, *, profile: Any, cron: str | None, enabled: bool = True) -> PeriodicTask | None:
        """Create, update or (cron empty) remove the profile's PeriodicTask."""
        return cron_set_schedule(
            profile=profile,
            cron=cron,
            enabled=enabled,
            name=f"{self.label} profile",
            task=f"{self.label}.profile_scheduled",
        )

    def run_scheduled(self, *, profile: Any) -> Any:
        """One scheduled run of PROFILE, sent to its box's worker now, or postponed (queued, saying why)
        while an engine of its box is inside its start; `release_postponed` releases or refuses it."""
        run = self.run_create(
            engine=profile.engine, spec=profile.spec(), profile=profile, trigger=self.run_model.Trigger.SCHEDULED
        )
        return run_scheduled(run, execute=self.tasks.run_execute)

    def release_postponed(self, *, now: datetime | None = None) -> int:
        """The kind's postponed scheduled runs, released, postponed again or refused. Returns the number released."""
        return release_postponed(self.run_model, execute=self.tasks.run_execute, now=now)

    def sweep_stale(self) -> int:
        """The kind's runs whose worker died mid-run (no result within `stale_budget_s`), failed. Returns how many."""
        return fail_overdue(self.run_model)


@dataclass(frozen=True)
class KindTasks:
    """A kind's four Celery tasks (celery's Task objects: the stubs have none)."""

    run_execute: Any
    profile_scheduled: Any
    release_postponed: Any
    sweep_stale: Any


def kind_tasks(kind: "Kind") -> KindTasks:
    """KIND's tasks, registered under its label's names (call once: `Kind.tasks` does)."""

    def run_execute(run_id: int) -> None:
        run = kind.run_model.objects.select_related("engine", "profile").filter(pk=run_id).first()
        if run is not None:
            kind.run_execute(run=run)

    def profile_scheduled(profile_id: int) -> None:
        """Beat (the profile's PeriodicTask), on any worker -> one scheduled run sent to its box's worker,
        or a queued run that waits while the box starts (released by "LABEL.release_postponed"), or
        skipped while the box is unreachable."""
        profile = kind.profile_model.objects.select_related("engine__host").filter(pk=profile_id).first()
        if profile is not None:
            kind.run_scheduled(profile=profile)

    def release_postponed() -> None:
        """Beat: release the scheduled runs that waited for their box's engines to start."""
        kind.release_postponed()

    def sweep_stale() -> None:
        """Beat: fail the runs whose worker died (and the kind's other stale work, `also_stale`)."""
        kind.sweep_stale()
        if kind.also_stale:
            import_string(kind.also_stale)()

    def task(name: str, fn: Any) -> Any:
        return shared_task(name=f"{kind.label}.{name}", ignore_result=True)(fn)

    return KindTasks(
        run_execute=task("run_execute", run_execute),
        profile_scheduled=task("profile_scheduled", profile_scheduled),
        release_postponed=task("release_postponed", release_postponed),
        sweep_stale=task("sweep_stale", sweep_stale),
    )
