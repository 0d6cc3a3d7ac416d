"""What every measured profile and run shares (benchmark runs and quality probe runs): the status, the
parameters' hash, who and when, the conditions and taint, the regression mark, and the lifecycle
that moves a run from queued to an end. Each kind keeps its own spec, session and scoring, and
says how its progress is counted (`counts`) and how long it may run (`stale_budget_s`).

An abstract model: each kind's table keeps its own name and columns; these fields are declared
once here instead of twice."""

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self, TypedDict

from django.conf import settings
from django.db import models
from django.utils import timezone

from dashboard.livebus import GROUP_ALL, LiveEvent, publish_on_commit
from dashboard.models.fleet import NAME_VALIDATOR

if TYPE_CHECKING:
    from django.db.models.fields.related_descriptors import RelatedManager
    from django_celery_beat.models import PeriodicTask

    from dashboard.models import Engine

REASON_MAX = 2000  # a failure's reason can carry an engine's whole error body
POSTPONED = "postponed: "  # the start of a postponed run's reason (what the release sweep looks for)


class Spec(Protocol):
    """What the shared core reads of a kind's spec: the hash of its parameters."""

    def params_hash(self) -> str: ...


class Progress(TypedDict):
    """Where a run stands: its live event's payload."""

    run: int
    done: int
    total: int
    status: str


class MeasuredProfile(models.Model):
    """Pinned parameters with their hash, a name and a cron (the kind's own `schedule` field);
    `spec()` is the kind's spec, the one thing hashed."""

    class Thinking(models.TextChoices):
        SERVER = "server", "server default"
        ON = "on", "on"
        OFF = "off", "off"

    name = models.CharField(max_length=63, unique=True, validators=[NAME_VALIDATOR])
    thinking = models.CharField(max_length=8, choices=Thinking.choices, default=Thinking.SERVER)
    params_hash = models.CharField(max_length=16, editable=False, db_index=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    if TYPE_CHECKING:
        # Each kind's run model points at its profile with related_name="runs"; the stubs see no
        # reverse relation on an abstract model.
        runs: RelatedManager["MeasuredRun"]
        # Declared by each kind: its engine and its cron's PeriodicTask.
        engine: Engine
        schedule: PeriodicTask | None
        schedule_id: int | None

    class Meta:
        abstract = True
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.params_hash = self.spec().params_hash()
        super().save(*args, **kwargs)

    def spec(self) -> Spec:
        raise NotImplementedError

    # A kind's profile returns its own run model (benchmarks.Run, probes.ProbeRun), whose figures its
    # callers read: the abstract model cannot name it without becoming generic, which Django's
    # migrations would record as a base. Hence Any.
    def last_run(self) -> Any:
        """The newest run with the profile's current parameters (None when it has none yet)."""
        return self.runs.filter(params_hash=self.params_hash).order_by("-created_at").first()

    def trend_runs(self, *fields: str) -> list[Any]:  # the kind's runs: see last_run
        """The done runs of the profile's current parameters, oldest first (only FIELDS loaded): its trend."""
        return list(
            self.runs.filter(params_hash=self.params_hash, status=MeasuredRun.Status.DONE)
            .order_by("created_at")
            .only(*fields)
        )


class MeasuredRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"
        REFUSED = "refused", "refused"

    params_hash = models.CharField(max_length=16, db_index=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.QUEUED)
    reason = models.TextField(blank=True, help_text="Why it was refused or failed")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    config = models.JSONField(
        default=dict, blank=True, help_text="Everything that was measured: params, models, version, KV pool, window"
    )
    conditions = models.JSONField(default=dict, blank=True, help_text="GPU clock, PSI, neighbours, at start and end")
    tainted = models.BooleanField(default=False)
    taint_reasons = models.JSONField(default=list, blank=True)
    regression = models.BooleanField(default=False)
    regression_detail = models.JSONField(default=dict, blank=True)

    # The live event a run page listens to for this kind's progress.
    PROGRESS_EVENT = ""

    if TYPE_CHECKING:
        # Every concrete kind has the default manager; the stubs give an abstract model none.
        objects: ClassVar[models.Manager[Self]]
        # Declared by each kind: its engine, what started it, and the choices of that.
        engine: Engine
        trigger: str

        class Trigger(models.TextChoices):
            SCHEDULED = "scheduled", "scheduled"

    class Meta:
        abstract = True
        ordering = ["-created_at"]

    def counts(self) -> tuple[int, int]:
        """(done, total) units of work: repetitions for a benchmark, cases for a probe."""
        raise NotImplementedError

    def stale_budget_s(self) -> float:
        """Seconds this run may stay "running" before its worker is taken for dead (plus a margin)."""
        raise NotImplementedError

    def list_row(self, **figures: object) -> dict[str, object]:
        """The run as `sparkops bench list` / `probe list` show a profile's last one, with the kind's FIGURES."""
        return {"id": self.pk, "status": self.status, **figures, "at": self.created_at.isoformat()}

    def claim(self) -> bool:
        """Queued → running, once: a redelivered task finds nothing to do. True when this call claimed it."""
        model = type(self)
        claimed = model.objects.filter(pk=self.pk, status=self.Status.QUEUED).update(
            status=self.Status.RUNNING, started_at=timezone.now()
        )
        self.refresh_from_db()
        return claimed == 1

    def progress_payload(self) -> Progress:
        """Where the run stands: what its live event carries and what its page catches up with."""
        done, total = self.counts()
        return {"run": self.pk, "done": done, "total": total, "status": self.status}

    def progress(self) -> None:
        """Tell the run's page (and the lists) where the run stands, after the transaction commits."""
        publish_on_commit(GROUP_ALL, LiveEvent(type=self.PROGRESS_EVENT, payload=dict(self.progress_payload())))

    def end(self, status: str, reason: str, *, also: Sequence[str] | None = None) -> Self:
        """Finish with STATUS (refused or failed) and why. ALSO: the other fields to save with it, in
        case the run changed them in memory; None saves the whole row."""
        self.status, self.reason, self.finished_at = status, reason[:REASON_MAX], timezone.now()
        self.save(update_fields=None if also is None else ["status", "reason", "finished_at", *also])
        self.progress()
        return self

    def refuse(self, reason: str) -> Self:
        """Refused before it sent anything (the prompt cannot fit, the engine is busy, the box did not start)."""
        return self.end(self.Status.REFUSED, reason, also=())

    def postpone(self, why: str) -> Self:
        """Keep this scheduled run queued, saying why it waits; the first reason and time stay in
        `config["waited"]`."""
        waited = self.config.get("waited") or {"since": timezone.now().isoformat(), "first_reason": why}
        self.config = {**self.config, "waited": {**waited, "reason": why}}
        self.reason = f"{POSTPONED}{why}; scheduled runs wait until the box's engines have started"
        self.save(update_fields=["config", "reason"])
        self.progress()
        return self
