"""Alert rules, events, silences and the notification outbox."""
from django.db import models

from dashboard.models.fleet import NAME_VALIDATOR


class NotificationChannel(models.Model):
    class Kind(models.TextChoices):
        EMAIL = "email", "email"
        WEBHOOK = "webhook", "webhook"

    class Health(models.TextChoices):
        OK = "ok", "ok"
        FAILING = "failing", "failing"

    name = models.CharField(max_length=63, unique=True, validators=[NAME_VALIDATOR])
    kind = models.CharField(max_length=8, choices=Kind.choices)
    # Validated per kind by dashboard.alerts.forms.ChannelForm:
    # email {"address": ...}; webhook {"url": ..., "format": "sparkops"|"alertmanager"}.
    config = models.JSONField(default=dict)
    secret = models.CharField(max_length=200, blank=True, help_text="HMAC-SHA256 key for X-SparkOps-Signature")
    enabled = models.BooleanField(default=True)
    health = models.CharField(max_length=8, choices=Health.choices, default=Health.OK)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return f"{self.name} ({self.kind})"

    @property
    def target(self):
        return self.config.get("address") or self.config.get("url") or ""
