"""A/B experiments: two arms on the same hashed workload, repetitions alternated
A, B, A, B …, each one a benchmark Run of its own, with both arms' configuration snapshots
taken before it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

if TYPE_CHECKING:
    from dashboard.models import ConfigSnapshot, Engine
    from sparkops.probes.models import ProbeRun

PROBE_KINDS = ("needle", "soak", "tool", "thinking", "contract")  # sparkops/probes/spec.py KINDS

MIN_REPS, MAX_REPS = 3, 25  # per arm; 3: docs/field-notes.md §12, 25 keeps a run under an hour at 512 tokens


class Experiment(models.Model):
    class Mode(models.TextChoices):
        SIDE_BY_SIDE = "side_by_side", "two engines side by side"
        RESTART = "restart", "one engine, restarted by the operator between arms"

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        WAITING = "waiting", "waiting for the operator's restart"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    name = models.CharField(max_length=120, help_text="What is being decided, e.g. 'MTP on codegen'")
    engine_a = models.ForeignKey("dashboard.Engine", on_delete=models.PROTECT, related_name="+")
    engine_b = models.ForeignKey("dashboard.Engine", on_delete=models.PROTECT, related_name="+")
    mode = models.CharField(max_length=12, choices=Mode.choices, default=Mode.SIDE_BY_SIDE)
    flags = models.JSONField(default=list, blank=True, help_text="The launch flags the arms are meant to differ by")
    workload = models.JSONField(default=dict, help_text="The run parameters both arms get (engine fields left out)")
    workload_hash = models.CharField(max_length=16, db_index=True)
    reps = models.PositiveSmallIntegerField(
        default=MIN_REPS, validators=[MinValueValidator(MIN_REPS), MaxValueValidator(MAX_REPS)], help_text="Per arm"
    )
    probe = models.CharField(
        max_length=10,
        blank=True,
        choices=[(k, k) for k in PROBE_KINDS],
        help_text="A quality probe run on each arm after its last repetition (a faster arm that answers worse shows)",
    )
    probe_run_a = models.ForeignKey(
        "probes.ProbeRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    probe_run_b = models.ForeignKey(
        "probes.ProbeRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    seed = models.PositiveIntegerField(
        default=18, help_text="The bootstrap's seed: the same runs give the same interval"
    )
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.QUEUED)
    reason = models.TextField(blank=True)
    verdict = models.JSONField(default=dict, blank=True)
    entry_id = models.PositiveIntegerField(null=True, blank=True, help_text="The change-log entry of the verdict")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"experiment {self.pk}: {self.name}"

    def engine(self, arm: str) -> Engine:
        return self.engine_a if arm == "A" else self.engine_b

    def probe_run(self, arm: str) -> ProbeRun | None:
        return self.probe_run_a if arm == "A" else self.probe_run_b


class Slot(models.Model):
    """One repetition of one arm, in the experiment's alternated order."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="slots")
    order = models.PositiveSmallIntegerField()
    arm = models.CharField(max_length=1, choices=[("A", "A"), ("B", "B")])
    run = models.OneToOneField(
        "bench.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="experiment_slot"
    )
    # Both arms' snapshots, read just before this repetition (None: the unit could not be read).
    snapshot_a = models.ForeignKey(
        "dashboard.ConfigSnapshot", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    snapshot_b = models.ForeignKey(
        "dashboard.ConfigSnapshot", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    valid = models.BooleanField(default=True)
    invalid_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["experiment", "order"]
        constraints = [models.UniqueConstraint(fields=["experiment", "order"], name="experiment_slot_order")]

    def __str__(self) -> str:
        return f"experiment {self.experiment_id} #{self.order + 1} {self.arm}"

    def snapshot(self) -> ConfigSnapshot | None:
        return self.snapshot_a if self.arm == "A" else self.snapshot_b
