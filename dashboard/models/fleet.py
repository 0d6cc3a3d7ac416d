"""What is watched: hosts (one Celery worker each) and the engines they serve."""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from dashboard.names import NameValidator

# Names are text and slugs (dashboard/names.py): hosts, engines, channels and profiles.
NAME_VALIDATOR = NameValidator()


class Host(models.Model):
    name = models.CharField(max_length=63, unique=True, validators=[NAME_VALIDATOR])
    created_at = models.DateTimeField(auto_now_add=True)
    # Heartbeat of the host's own worker; "collector stale" and /healthz read it.
    last_report_at = models.DateTimeField(null=True, blank=True)
    # The last host reading as `sparkops poll --json` prints it: host, gpus, processes.
    latest = models.JSONField(default=dict, blank=True)
    # Set by the box's worker when it starts: its SPARKOPS_UNIT_ACTIONS (the Restart button on down cards).
    unit_actions = models.BooleanField(
        default=False, editable=False, help_text="This box's worker runs unit actions (SPARKOPS_UNIT_ACTIONS=1)"
    )

    # The fencing token of the last poller that stored this box's rows (its lease's, Redis's
    # counter, `poller/lease.py`): a store carrying a smaller one is a poller that lost the box
    # meanwhile, and is refused (`poller/pending.py`).
    fence = models.PositiveBigIntegerField(default=0, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def queue(self):
        return f"host.{self.name}"


class Engine(models.Model):
    class Kind(models.TextChoices):
        VLLM = "vllm", "vLLM"
        LLAMACPP = "llamacpp", "llama.cpp llama-server"
        SGLANG = "sglang", "SGLang"
        OPENAI = "openai", "OpenAI-compatible"

    class Status(models.TextChoices):
        UNKNOWN = "unknown", "unknown"
        UP = "up", "up"
        LOADING = "loading", "loading"
        DOWN = "down", "down"

    class UnitScope(models.TextChoices):
        SYSTEM = "system", "system"
        USER = "user", "user (--user)"

    name = models.CharField(max_length=63, unique=True, validators=[NAME_VALIDATOR])
    kind = models.CharField(max_length=16, choices=Kind.choices)
    url = models.URLField(max_length=300, help_text="Base URL, e.g. http://127.0.0.1:8000")
    host = models.ForeignKey(Host, on_delete=models.PROTECT, related_name="engines")
    unit = models.CharField(max_length=200, blank=True, help_text="systemd unit, e.g. vllm-main.service")
    unit_scope = models.CharField(max_length=8, choices=UnitScope.choices, default=UnitScope.SYSTEM)
    expected_up = models.BooleanField(default=True, help_text="Alert when this engine is not serving.")
    poll_interval_s = models.FloatField(
        null=True,
        blank=True,
        # The same floor as SPARKOPS_POLL_INTERVAL; an hour is the longest a watcher can call watching.
        validators=[MinValueValidator(0.5), MaxValueValidator(3600)],
        help_text="Overrides SPARKOPS_POLL_INTERVAL (0.5–3600 s).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    status = models.CharField(max_length=8, choices=Status.choices, default=Status.UNKNOWN)
    status_reason = models.TextField(blank=True)
    status_changed_at = models.DateTimeField(null=True, blank=True)
    last_poll_at = models.DateTimeField(null=True, blank=True)
    last_ok_at = models.DateTimeField(null=True, blank=True)
    # The last engine reading as `sparkops poll --json` prints it (one engine object).
    latest = models.JSONField(default=dict, blank=True)
    # Engines are retired, never deleted: history (the change log, ledgers, alerts, incidents,
    # benchmark runs) points at them for ever. A retired engine is not polled nor shown live.
    retired_at = models.DateTimeField(
        null=True, blank=True, help_text="When it stopped being watched; empty while it is watched."
    )

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def is_retired(self):
        return self.retired_at is not None

    @property
    def base_url(self):
        return self.url.rstrip("/")
