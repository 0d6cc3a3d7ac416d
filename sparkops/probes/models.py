"""Quality probe profiles, runs and cases (one case = one request and how it was scored).

A probe profile is a benchmark profile for quality: pinned parameters with a hash, a cron, odd
repetitions, production sampling unless stated; its runs keep their conditions and taint."""

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from sparkops.measured.models import MeasuredProfile, MeasuredRun

from .spec import KINDS, MAX_DECOYS, MAX_REPS, MAX_TIMEOUT_S, MAX_TOKENS, ProbeSpec, parse_depths


class ProbeProfile(MeasuredProfile):
    class Sampling(models.TextChoices):
        SERVER = "server", "server defaults (production: what an agent that sends nothing gets)"
        GREEDY = "greedy", "greedy (temperature 0)"
        EXPLICIT = "explicit", "explicit JSON"

    engine = models.ForeignKey("dashboard.Engine", on_delete=models.PROTECT, related_name="probe_profiles")
    kind = models.CharField(max_length=10, choices=[(k, k) for k in KINDS])
    tokens = models.PositiveIntegerField(
        default=4096,
        validators=[MinValueValidator(64), MaxValueValidator(MAX_TOKENS)],
        help_text="needle: haystack tokens (counted by the engine's /tokenize); soak: tokens to generate",
    )
    depths = models.CharField(max_length=80, default="10,50,90", help_text="needle: depths in percent, e.g. 10,50,90")
    decoys = models.PositiveSmallIntegerField(
        default=2, validators=[MaxValueValidator(MAX_DECOYS)], help_text="needle: decoys sharing the anchor phrase"
    )
    corpus = models.CharField(
        max_length=300, default="lighthouse", help_text="needle: a shipped corpus name, or a text file on the box"
    )
    control = models.BooleanField(default=False, help_text="needle: also run the control corpus (same length)")
    control_corpus = models.CharField(max_length=300, default="orchard")
    sampling = models.CharField(max_length=10, choices=Sampling.choices, default=Sampling.SERVER)
    sampling_params = models.JSONField(default=dict, blank=True)
    reps = models.PositiveSmallIntegerField(
        default=3,
        validators=[MinValueValidator(3), MaxValueValidator(MAX_REPS)],
        help_text="Per case, odd, at least 3",
    )
    timeout_s = models.PositiveIntegerField(
        default=600, validators=[MinValueValidator(1), MaxValueValidator(MAX_TIMEOUT_S)]
    )
    schedule = models.OneToOneField(
        "django_celery_beat.PeriodicTask",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="probe_profile",
    )

    def clean(self):
        errors = {}
        if self.reps % 2 == 0:
            errors["reps"] = "Use an odd number of repetitions so the majority is one reading."
        try:
            parse_depths(self.depths)
        except ValueError as exc:
            errors["depths"] = str(exc)
        if self.sampling != self.Sampling.EXPLICIT and self.sampling_params:
            errors["sampling_params"] = "Sampling parameters apply only to explicit sampling."
        if errors:
            raise ValidationError(errors)

    def spec(self):
        return ProbeSpec.from_profile(self)


class ProbeRun(MeasuredRun):
    class Trigger(models.TextChoices):
        MANUAL = "manual", "manual"
        SCHEDULED = "scheduled", "scheduled"
        CLI = "cli", "command line"

    profile = models.ForeignKey(ProbeProfile, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
    engine = models.ForeignKey("dashboard.Engine", on_delete=models.PROTECT, related_name="probe_runs")
    kind = models.CharField(max_length=10)
    trigger = models.CharField(max_length=10, choices=Trigger.choices, default=Trigger.MANUAL)
    # The shared fields whose description is the probes' own.
    reason = models.TextField(blank=True)
    config = models.JSONField(default=dict, blank=True, help_text="params, engine, model, version, window")
    conditions = models.JSONField(default=dict, blank=True)
    result = models.JSONField(default=dict, blank=True, help_text="the kind's table and verdict")
    passed = models.BooleanField(null=True, help_text="every case scored good; None when not scored")
    headline = models.CharField(max_length=200, blank=True)
    done_cases = models.PositiveIntegerField(default=0)
    total_cases = models.PositiveIntegerField(default=0)

    PROGRESS_EVENT = "probe.progress"

    class Meta(MeasuredRun.Meta):
        # the trend and the last good run: one profile's runs by hash, newest first
        indexes = [models.Index(fields=["profile", "params_hash", "created_at"], name="probe_run_trend")]

    def __str__(self):
        return f"probe run {self.pk} {self.kind} {self.engine} {self.status}"

    def counts(self):
        return self.done_cases, self.total_cases

    def stale_budget_s(self):
        """Every case timing out (at least 8, or the needle's depths × reps × corpora), plus two."""
        params = self.config.get("params") or {}
        cases = max(self.total_cases, 2 * len(params.get("depths") or [1]) * params.get("reps", 3), 8)
        return params.get("timeout_s", 600) * (cases + 2)


class ProbeCase(models.Model):
    """One request of a run: its label (depth, corpus, arm), its score and what came back."""

    run = models.ForeignKey(ProbeRun, on_delete=models.CASCADE, related_name="cases")
    index = models.PositiveIntegerField()
    label = models.CharField(max_length=40)
    rep = models.PositiveSmallIntegerField(default=0)
    ok = models.BooleanField(help_text="the request answered (else: bucket)")
    bucket = models.CharField(max_length=14, blank=True)
    error = models.TextField(blank=True)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    finish_reason = models.CharField(max_length=20, blank=True)
    verdict = models.CharField(max_length=20, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    reasoning_tokens = models.PositiveIntegerField(null=True, blank=True)
    seconds = models.FloatField(null=True, blank=True)
    text = models.TextField(blank=True, help_text="the answer (a soak's whole text), capped")

    class Meta:
        ordering = ["run", "index"]

    def __str__(self):
        return f"run {self.run_id} case {self.index} {self.label} {self.verdict}"
