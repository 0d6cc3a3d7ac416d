"""What the controls (sparkops/controls/) record: each guarded launch (`sparkops launch`)."""

from django.db import models
from django.utils import timezone


class Launch(models.Model):
    """One engine started through `sparkops launch`: what ran, with which compile caps, by whom and
    when, what it planned to hold, and what its start came to. Written before the engine's process
    runs, so the engine is known before the process scan finds it; its card says it came this way."""

    class Outcome(models.TextChoices):
        STARTING = "", "starting"
        READY = "ready", "served"
        DIED = "died", "process gone before serving"
        BUDGET = "budget", "not serving within its budget"

    host = models.ForeignKey("dashboard.Host", on_delete=models.PROTECT, related_name="launches")
    engine = models.ForeignKey(
        "dashboard.Engine", null=True, blank=True, on_delete=models.PROTECT, related_name="launches"
    )
    kind = models.CharField(max_length=16)
    argv = models.JSONField(default=list, help_text="the engine's command line, as exec'd")
    caps = models.JSONField(default=dict, help_text="{NAME: {value, was}}: the compile caps in its environment")
    url = models.URLField(max_length=300)
    pid = models.PositiveIntegerField(null=True, blank=True, help_text="the engine's process (the launch's own pid)")
    user = models.CharField(max_length=150, help_text="who ran it (the login name; SUDO_USER through sudo)")
    started_at = models.DateTimeField(default=timezone.now)
    waited_s = models.FloatField(default=0.0, help_text="how long it waited for the box's other starts")
    share = models.FloatField(null=True, blank=True, help_text="its planned share of the box's memory")
    share_basis = models.CharField(max_length=200, blank=True)
    preflight = models.TextField(blank=True, help_text="the memory preflight's numbers")
    forced = models.TextField(blank=True, help_text="--force REASON, when the preflight refused and it started anyway")
    entry = models.ForeignKey(
        "changelog.Entry", null=True, blank=True, on_delete=models.SET_NULL, related_name="launches"
    )
    outcome = models.CharField(max_length=8, choices=Outcome.choices, default=Outcome.STARTING, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    outcome_line = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["host", "started_at"], name="launch_host_time")]

    def __str__(self):
        return f"{self.kind} launch on {self.host} by {self.user} at {self.started_at:%Y-%m-%d %H:%M}"
