"""How each engine was launched, versioned: a snapshot whenever the effective configuration
(unit properties and files, environment, flags, the engine's own account) hashes differently."""

from django.conf import settings
from django.db import models


class ConfigSnapshot(models.Model):
    engine = models.ForeignKey("dashboard.Engine", on_delete=models.PROTECT, related_name="config_snapshots")
    observed_at = models.DateTimeField(help_text="When this configuration was first seen")
    hash = models.CharField(max_length=64, help_text="sha256 of the canonical JSON of `data`")
    data = models.JSONField(help_text="unit, environment, flags with the file that set each, the engine's account")
    previous = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The observed change-log entry written for the difference from `previous` (a plain id, as
    # the log's evidence keeps its references: the log never depends on this table).
    logged_entry_id = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-observed_at", "-id"]
        indexes = [models.Index(fields=["engine", "observed_at"], name="configsnap_engine_time")]
        verbose_name = "configuration snapshot"

    def __str__(self):
        return f"{self.engine} {self.observed_at:%Y-%m-%d %H:%M} {self.hash[:10]}"

    @property
    def flags(self):
        return ((self.data or {}).get("flags") or {}).get("flags") or {}


class EngineStart(models.Model):
    """One start of an engine's unit, measured: the unit's start (ExecMainStartTimestamp) to
    active (ActiveEnterTimestamp) and to the first healthy answer the poller saw; cold when
    compilers ran in the unit during it, warm when none did while the worker watched the whole
    start, unknown when it began before the worker saw it (no compilers seen proves nothing)."""

    class Kind(models.TextChoices):
        COLD = "cold", "cold"
        WARM = "warm", "warm"
        UNKNOWN = "unknown", "not observed"

    engine = models.ForeignKey("dashboard.Engine", on_delete=models.PROTECT, related_name="starts")
    started_at = models.DateTimeField()
    active_at = models.DateTimeField(null=True, blank=True)
    healthy_at = models.DateTimeField(null=True, blank=True, help_text="empty: the start failed before it served")
    kind = models.CharField(
        max_length=7,
        choices=Kind.choices,
        help_text="unknown: begun while the worker was down, its compilers unseen; in no cold/warm budget",
    )
    compilers_max = models.PositiveIntegerField(default=0, help_text="most compilers seen in the unit during the start")
    budget_s = models.FloatField(null=True, blank=True, help_text="the readiness helper's budget")
    timeout_s = models.FloatField(null=True, blank=True, help_text="TimeoutStartSec")
    gate = models.CharField(
        max_length=8,
        blank=True,
        choices=[
            ("ready", "ready"),
            ("died", "main process gone"),
            ("budget", "budget ran out"),
            ("refused", "refused"),
        ],
        help_text="what its readiness gate (sparkops wait-ready) said, from the unit's journal",
    )
    gate_s = models.FloatField(null=True, blank=True, help_text="when the gate said it, in s from its own start")
    gate_line = models.CharField(max_length=300, blank=True)
    measured = models.BooleanField(
        default=True,
        help_text=(
            "off: it began before the worker saw it and no gate said when it served; its healthy_at is the "
            "worker's first answer (an upper bound), left out of the budgets learned from starts"
        ),
    )

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["engine", "started_at"], name="enginestart_engine_time")]

    def __str__(self):
        took = f"{self.duration_s:.0f} s" if self.healthy_at else f"failed ({self.gate or 'never served'})"
        return f"{self.engine} {self.kind} start {self.started_at:%Y-%m-%d %H:%M}: {took}"

    @property
    def duration_s(self):
        """Seconds to the first healthy answer; None for a start that failed before one."""
        return (self.healthy_at - self.started_at).total_seconds() if self.healthy_at else None


class AuditThreshold(models.Model):
    """A box's own value for one threshold of a launch-audit check (`sparkops/audit/`), set by an
    admin on the box's audit page or with `sparkops audit --save CHECK.THRESHOLD=VALUE`. A check
    without a row here uses its DEFAULTS; `sparkops audit --set` overrides both for one run."""

    host = models.ForeignKey("dashboard.Host", on_delete=models.CASCADE, related_name="audit_thresholds")
    check_key = models.CharField(max_length=64, help_text="the check's key, e.g. compile_caps")
    name = models.CharField(max_length=64, help_text="the threshold, e.g. max_jobs")
    value = models.CharField(max_length=200, help_text="as typed; read with the threshold's type and bounds")
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["host", "check_key", "name"]
        constraints = [models.UniqueConstraint(fields=["host", "check_key", "name"], name="auditthreshold_unique")]
        verbose_name = "audit threshold"

    def __str__(self):
        return f"{self.host}: {self.check_key}.{self.name}={self.value}"
