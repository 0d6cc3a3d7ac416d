"""The two ledgers that grow from the change log: KV pool sizes and incidents."""

from django.conf import settings
from django.db import models

GIB = 1024**3


class KVPoolEntry(models.Model):
    class Source(models.TextChoices):
        COLLECTOR = "collector", "collector (after a restart)"
        MANUAL = "manual", "operator"

    recorded_at = models.DateTimeField(help_text="When this pool took effect")
    engine = models.ForeignKey("dashboard.Engine", on_delete=models.PROTECT, related_name="kv_pool_entries")
    memory_share = models.FloatField(null=True, blank=True, help_text="--gpu-memory-utilization, 0–1")
    kv_memory_bytes = models.BigIntegerField(null=True, blank=True)
    pool_tokens = models.BigIntegerField(null=True, blank=True)
    window = models.PositiveIntegerField(null=True, blank=True, help_text="--max-model-len")
    concurrency = models.FloatField(null=True, blank=True, help_text="Maximum concurrency at the window")
    previous = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.MANUAL)
    note = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-recorded_at"]
        indexes = [models.Index(fields=["engine", "recorded_at"], name="kvpool_engine_time")]
        verbose_name = "KV-pool ledger row"

    def __str__(self):
        return f"{self.engine} {self.recorded_at:%Y-%m-%d}: {self.pool_tokens} tokens"

    @property
    def tokens_per_gib(self):
        if not self.pool_tokens or not self.kv_memory_bytes:
            return None
        return self.pool_tokens / (self.kv_memory_bytes / GIB)


class Incident(models.Model):
    opened_at = models.DateTimeField()
    engine = models.ForeignKey(
        "dashboard.Engine", null=True, blank=True, on_delete=models.PROTECT, related_name="incidents"
    )
    unit = models.CharField(max_length=200, blank=True)
    trigger = models.TextField(help_text="What happened, e.g. 'CUDA illegal instruction, exit 0, not restarted'")
    peak = models.CharField(max_length=200, blank=True, help_text="Peak value or how long it lasted")
    closed_at = models.DateTimeField(null=True, blank=True)
    fix_that_held = models.TextField(blank=True)
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-opened_at"]

    def __str__(self):
        return f"{self.opened_at:%Y-%m-%d %H:%M} {self.unit or self.engine}: {self.trigger[:60]}"

    @property
    def duration(self):
        return (self.closed_at - self.opened_at) if self.closed_at else None
