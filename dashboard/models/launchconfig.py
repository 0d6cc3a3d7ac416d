"""How each engine was launched, versioned: a snapshot whenever the effective configuration
(unit properties and files, environment, flags, the engine's own account) hashes differently."""
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
