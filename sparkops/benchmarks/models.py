"""Benchmark profiles, runs and repetitions (definitions of every figure: docs/benchmarks.md)."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator, MaxValueValidator, MinValueValidator
from django.db import models

from dashboard.bounds import Bounds
from sparkops.measured.models import MeasuredProfile, MeasuredRun

from .spec import RunSpec

# Bounds of a profile: a context of 1M tokens is the largest any engine here serves.
MAX_DEPTH, MAX_OUTPUT, MAX_REPS, MAX_CONCURRENCY, MAX_TIMEOUT_S = 1_048_576, 131_072, 51, 256, 86_400
MAX_INSTRUCTION = 4000
# The profile's numbers, each field's validators; an ad-hoc run is held to them too (bounds.spec_problems).
BOUNDS = {
    "depth": Bounds(None, MAX_DEPTH),  # a PositiveIntegerField: 0 is its own lower end
    "output_tokens": Bounds(1, MAX_OUTPUT),
    "reps": Bounds(1, MAX_REPS),
    "concurrency": Bounds(1, MAX_CONCURRENCY),
    "timeout_s": Bounds(1, MAX_TIMEOUT_S),
}


class Profile(MeasuredProfile):
    class Mode(models.TextChoices):
        COLD = "cold", "cold (fresh prompt, salted, nothing cached)"
        FOLLOW_UP = "follow_up", "follow-up (warm prefix cache)"

    class Sampling(models.TextChoices):
        SERVER = "server", "server defaults (what an agent that sends nothing gets)"
        GREEDY = "greedy", "greedy (temperature 0)"
        EXPLICIT = "explicit", "explicit JSON"

    engine = models.ForeignKey("dashboard.Engine", on_delete=models.PROTECT, related_name="bench_profiles")
    workload = models.CharField(max_length=80, default="essay", help_text="Label of the prompt shape, e.g. 'codegen'")
    instruction = models.TextField(
        default="Continue the text above with a long, detailed essay.",
        validators=[MaxLengthValidator(MAX_INSTRUCTION)],
        max_length=MAX_INSTRUCTION,
        help_text="The task appended after the filler; it decides how easy decoding is",
    )
    depth = models.PositiveIntegerField(
        default=1024,
        validators=BOUNDS["depth"].validators(),
        help_text="Prompt tokens (checked against usage.prompt_tokens), 0–1,048,576",
    )
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.COLD)
    output_tokens = models.PositiveIntegerField(
        default=512,
        validators=BOUNDS["output_tokens"].validators(),
        help_text="Pinned with min_tokens/n_predict + ignore_eos, 1–131,072",
    )
    sampling = models.CharField(max_length=10, choices=Sampling.choices, default=Sampling.SERVER)
    sampling_params = models.JSONField(
        default=dict, blank=True, help_text='Only for explicit, e.g. {"temperature": 0.6}'
    )
    reps = models.PositiveSmallIntegerField(
        default=3,
        validators=BOUNDS["reps"].validators(),
        help_text="Odd, so the median is a measured value; 1–51",
    )
    concurrency = models.PositiveSmallIntegerField(
        default=1,
        validators=BOUNDS["concurrency"].validators(),
        help_text="Parallel requests, 1–256",
    )
    force = models.BooleanField(
        default=False, help_text="Allow depth > 0 with concurrency > 1 (deadlocked an engine once)"
    )
    timeout_s = models.PositiveIntegerField(
        default=600,
        validators=BOUNDS["timeout_s"].validators(),
        help_text="Per request, whole answer; 1–86,400 s",
    )
    schedule = models.OneToOneField(
        "django_celery_beat.PeriodicTask",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="bench_profile",
    )

    def clean(self):
        errors = {}
        if self.reps % 2 == 0:
            errors["reps"] = "Use an odd number of repetitions so the median is one measured run."
        if self.sampling == self.Sampling.EXPLICIT and not isinstance(self.sampling_params, dict):
            errors["sampling_params"] = "Explicit sampling needs a JSON object."
        if self.sampling != self.Sampling.EXPLICIT and self.sampling_params:
            errors["sampling_params"] = "Sampling parameters apply only to explicit sampling."
        if self.output_tokens < 2:
            errors["output_tokens"] = "Pin at least 2 output tokens (decode rate needs two)."
        if errors:
            raise ValidationError(errors)

    def spec(self):
        return RunSpec.from_profile(self)


class Run(MeasuredRun):
    class Trigger(models.TextChoices):
        MANUAL = "manual", "manual"
        SCHEDULED = "scheduled", "scheduled"
        CLI = "cli", "command line"
        PAIR = "pair", "co-residency pair"
        SWEEP = "sweep", "sweep cell"
        RATE = "rate", "arrival-rate run"

    profile = models.ForeignKey(Profile, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
    engine = models.ForeignKey("dashboard.Engine", on_delete=models.PROTECT, related_name="bench_runs")
    trigger = models.CharField(max_length=10, choices=Trigger.choices, default=Trigger.MANUAL)
    checks = models.JSONField(default=list, blank=True, help_text="Cold/follow-up cache and depth verification")
    stats = models.JSONField(default=dict, blank=True)
    done_reps = models.PositiveIntegerField(default=0)
    total_reps = models.PositiveIntegerField(default=0)
    pair = models.ForeignKey("PairRun", null=True, blank=True, on_delete=models.CASCADE, related_name="runs")
    phase = models.CharField(max_length=4, blank=True, help_text="solo | both (co-residency)")
    sweep = models.ForeignKey("Sweep", null=True, blank=True, on_delete=models.CASCADE, related_name="cells")
    sweep_value = models.PositiveIntegerField(null=True, blank=True, help_text="This cell's value on the sweep's axis")

    PROGRESS_EVENT = "bench.progress"

    class Meta(MeasuredRun.Meta):
        # the trend chart and the regression baseline: one profile's runs by hash, newest first
        indexes = [models.Index(fields=["profile", "params_hash", "created_at"], name="bench_run_trend")]

    def __str__(self):
        return f"run {self.pk} {self.engine} {self.status}"

    def counts(self):
        return self.done_reps, self.total_reps

    def stale_budget_s(self):
        params = self.config.get("params") or {}
        arrivals = (self.config.get("rate") or {}).get("duration_s", 0)  # a rate run sends for its whole duration
        return params.get("timeout_s", 600) * (params.get("reps", 3) + 3) + arrivals

    @property
    def decode_median(self):
        return (self.stats.get("decode_tokens_per_s") or {}).get("median")


class Repetition(models.Model):
    """One request (one repetition, one stream of it when concurrency > 1)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="repetitions")
    index = models.PositiveIntegerField()
    stream = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField()
    ok = models.BooleanField()
    bucket = models.CharField(max_length=14, blank=True)
    error = models.TextField(blank=True)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    finish_reason = models.CharField(max_length=20, blank=True)
    ttft_ms = models.FloatField(null=True, blank=True)
    first_answer_ms = models.FloatField(null=True, blank=True)
    decode_tokens_per_s = models.FloatField(null=True, blank=True)
    chunks = models.PositiveIntegerField(null=True, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    cached_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    reasoning_tokens = models.PositiveIntegerField(null=True, blank=True)
    reasoning_chunks = models.PositiveIntegerField(default=0)
    total_ms = models.FloatField(null=True, blank=True)
    chunk_summary = models.JSONField(default=dict, blank=True)
    timings = models.JSONField(null=True, blank=True, help_text="llama.cpp's own timings, when sent")

    class Meta:
        ordering = ["run", "index", "stream"]

    def __str__(self):
        return f"run {self.run_id} rep {self.index}.{self.stream}"


class PairRun(models.Model):
    """Co-residency: each engine alone, then both generating at once."""

    profile_a = models.ForeignKey(Profile, on_delete=models.CASCADE, related_name="+")
    profile_b = models.ForeignKey(Profile, on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=8, choices=Run.Status.choices, default=Run.Status.QUEUED)
    reason = models.TextField(blank=True)
    table = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"pair {self.pk}: {self.profile_a} + {self.profile_b}"


class Sweep(models.Model):
    """One axis (concurrency or depth), everything else fixed and hashed; one run per cell, in order."""

    class Axis(models.TextChoices):
        CONCURRENCY = "concurrency", "concurrency"
        DEPTH = "depth", "context depth"

    engine = models.ForeignKey("dashboard.Engine", on_delete=models.PROTECT, related_name="bench_sweeps")
    axis = models.CharField(max_length=12, choices=Axis.choices)
    values = models.JSONField(help_text="The axis values, run in this order")
    base = models.JSONField(help_text="The fixed parameters (a RunSpec; the axis field is set per cell)")
    params_hash = models.CharField(max_length=16, db_index=True)
    error_threshold = models.FloatField(
        default=0.2,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Stop when a cell's failed share of requests passes this",
    )
    trigger = models.CharField(max_length=10, choices=Run.Trigger.choices, default=Run.Trigger.MANUAL)
    status = models.CharField(max_length=8, choices=Run.Status.choices, default=Run.Status.QUEUED)
    reason = models.TextField(blank=True, help_text="Why it was refused or failed")
    stop_reason = models.TextField(blank=True, help_text="Why it stopped before its last cell")
    table = models.JSONField(default=list, blank=True, help_text="One row per finished cell (cells.cell_figures)")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"sweep {self.pk} {self.engine} {self.axis} {self.values}"
