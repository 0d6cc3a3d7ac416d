"""Alert rules, events, silences, maintenance windows, routing and the notification outbox."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, URLValidator, validate_email
from django.db import models
from django.db.models import Q

from dashboard.models.fleet import NAME_VALIDATOR

from .apprise_urls import apprise_url_error, redacted
from .severity import SEVERITY_RANK, Severity

# A rule's re-notify interval, the one bound of it (the model, the rules form, rule_update).
RENOTIFY_MIN_S, RENOTIFY_MAX_S = 60, 7 * 86400


def config_problems(kind: str | None, config: object) -> dict[str, str]:
    """What is wrong with a channel's CONFIG for its KIND, by key ({"url": "…"}); {} when fine.
    One rule for the Channels form, the CLI and the admin's raw JSON: it lives with the model, so that
    the model's clean() needs no form (the forms import the models, never the other way)."""
    config = config if isinstance(config, dict) else {}
    if kind == "email":
        try:
            validate_email(config.get("address") or "")
        except ValidationError:
            return {"address": "An email channel needs a valid address."}
    elif kind == "webhook":
        try:
            URLValidator(schemes=["http", "https"])(config.get("url") or "")
        except ValidationError:
            return {"url": "A webhook channel needs an http:// or https:// URL."}
        if config.get("format", "sparkops") not in ("sparkops", "alertmanager", ""):
            return {"format": "A webhook's format is 'sparkops' or 'alertmanager'."}
    elif kind == "apprise":
        problem = apprise_url_error(config.get("url"))
        if problem:
            return {"url": problem}
    return {}


class NotificationChannel(models.Model):
    # Not stored: the admin's routing form of the Channels page (views._channels_page).
    route_form: object

    class Kind(models.TextChoices):
        EMAIL = "email", "email"
        WEBHOOK = "webhook", "webhook"
        APPRISE = "apprise", "Apprise (chat, push)"

    class Health(models.TextChoices):
        OK = "ok", "ok"
        FAILING = "failing", "failing"

    name = models.CharField(max_length=63, unique=True, validators=[NAME_VALIDATOR])
    kind = models.CharField(max_length=8, choices=Kind.choices)
    # Validated per kind by config_problems above (the Channels form, the CLI, the admin):
    # email {"address": ...}; webhook {"url": ..., "format": "sparkops"|"alertmanager"};
    # apprise {"url": an Apprise URL, e.g. ntfy://topic} (checked by Apprise when saved).
    config = models.JSONField(default=dict)
    secret = models.CharField(max_length=200, blank=True, help_text="HMAC-SHA256 key for X-SparkOps-Signature")
    enabled = models.BooleanField(default=True)
    health = models.CharField(max_length=8, choices=Health.choices, default=Health.OK)
    last_error = models.TextField(blank=True)
    failing_since = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    @property
    def target(self) -> str:
        if self.kind == self.Kind.APPRISE:  # its URL holds the service's token: shown masked
            return redacted(self.config.get("url", ""))
        return self.config.get("address") or self.config.get("url") or ""

    def clean(self) -> None:
        """The rules of the Channels form, for a config written as raw JSON (the admin): a webhook
        without a "url", an Apprise URL Apprise cannot read, … are refused when saved."""

        problems = config_problems(self.kind, self.config)
        if problems:
            raise ValidationError({"config": [f'{text} (key "{key}" of the JSON)' for key, text in problems.items()]})


class Route(models.Model):
    """Which rules and severities a channel receives. A channel without routes receives everything."""

    channel = models.ForeignKey(NotificationChannel, on_delete=models.CASCADE, related_name="routes")
    rule = models.CharField(max_length=40, blank=True, help_text="Rule key; blank means every rule")
    min_severity = models.CharField(max_length=8, choices=Severity.choices, default=Severity.INFO)

    def __str__(self) -> str:
        return f"{self.rule or 'all rules'} ≥ {self.min_severity} → {self.channel.name}"

    def matches(self, rule: str, severity: str) -> bool:
        return (not self.rule or self.rule == rule) and SEVERITY_RANK[severity] >= SEVERITY_RANK[self.min_severity]


class AlertRule(models.Model):
    """Stored configuration of one rule class (sparkops.alerts.rules); defaults live in the class."""

    key = models.CharField(max_length=40, unique=True)
    enabled = models.BooleanField(default=True)
    severity = models.CharField(
        max_length=8, choices=Severity.choices, blank=True, help_text="Blank: the rule's default"
    )
    # Overrides of the class's DEFAULTS (thresholds, durations in seconds); validated by the rules form.
    params = models.JSONField(default=dict, blank=True)
    renotify_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(RENOTIFY_MIN_S), MaxValueValidator(RENOTIFY_MAX_S)],
        help_text="Re-notify unacknowledged critical alerts every N s (60 s – 7 days)",
    )

    class Meta:
        ordering = ["key"]

    def __str__(self) -> str:
        return self.key


class AlertRuleOverride(models.Model):
    """Per-engine (or per-host) overrides of one rule's thresholds, durations and enablement."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="overrides")
    engine = models.ForeignKey("dashboard.Engine", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    host = models.ForeignKey("dashboard.Host", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    enabled = models.BooleanField(null=True, blank=True, help_text="Blank: as the rule")
    params = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "engine"], condition=Q(engine__isnull=False), name="alertoverride_rule_engine"
            ),
            models.UniqueConstraint(
                fields=["rule", "host"], condition=Q(host__isnull=False), name="alertoverride_rule_host"
            ),
        ]


class AlertEvent(models.Model):
    class State(models.TextChoices):
        PENDING = "pending", "pending"
        FIRING = "firing", "firing"
        RESOLVED = "resolved", "resolved"

    OPEN_STATES = (State.PENDING, State.FIRING)
    # Not stored: set by selectors.mark_suppressed for the live view's marks.
    silenced_by: "Silence | None"
    maintenance: "MaintenanceWindow | None"

    rule = models.CharField(max_length=40)
    severity = models.CharField(max_length=8, choices=Severity.choices)
    state = models.CharField(max_length=8, choices=State.choices, default=State.PENDING)
    engine = models.ForeignKey(
        "dashboard.Engine", null=True, blank=True, on_delete=models.PROTECT, related_name="alert_events"
    )
    host = models.ForeignKey(
        "dashboard.Host", null=True, blank=True, on_delete=models.CASCADE, related_name="alert_events"
    )
    # What the alert is about, e.g. "vllm-main", "spark-1/gpu0", "vllm-main.service".
    subject = models.CharField(max_length=200)
    cause = models.CharField(max_length=80, blank=True)
    message = models.TextField()
    details = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField(help_text="When the condition was first seen")
    fired_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    last_notified_at = models.DateTimeField(null=True, blank=True)
    incident = models.ForeignKey(
        "dashboard.Incident", null=True, blank=True, on_delete=models.SET_NULL, related_name="alert_events"
    )
    # Not a column: what live/cards.worst_alerts hands the engine cards, {card field: severity}
    # of the values an alert is firing on; only its events have it.
    hot: dict[str, str]

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            # One open event per rule and subject: the lifecycle upserts into it, never duplicates.
            models.UniqueConstraint(
                fields=["rule", "subject"],
                condition=Q(state__in=["pending", "firing"]),
                name="alertevent_one_open_per_rule_subject",
            ),
        ]
        indexes = [
            # The live view's "what is firing" and the list's state filter.
            models.Index(fields=["state", "-started_at"], name="alertevent_state_started"),
        ]

    def __str__(self) -> str:
        return f"{self.rule} {self.subject} {self.state}"

    @property
    def is_open(self) -> bool:
        return self.state in self.OPEN_STATES


class AlertNote(models.Model):
    """The timeline of one event: state changes, acks, silences, suppressed notifications."""

    event = models.ForeignKey(AlertEvent, on_delete=models.CASCADE, related_name="notes")
    at = models.DateTimeField()
    kind = models.CharField(max_length=20)
    text = models.TextField()
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["at", "id"]


class Silence(models.Model):
    """No notifications for matching alerts until `until` (events are still recorded)."""

    engine = models.ForeignKey("dashboard.Engine", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    host = models.ForeignKey("dashboard.Host", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    rule = models.CharField(max_length=40, blank=True, help_text="Blank: every rule")
    until = models.DateTimeField()
    reason = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-until"]

    def __str__(self) -> str:
        return f"silence {self.rule or 'all rules'} on {self.engine or self.host or 'everything'} until {self.until:%Y-%m-%d %H:%M}"


class MaintenanceWindow(models.Model):
    """Planned work: matching alerts notify nobody between starts_at and ends_at."""

    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    engine = models.ForeignKey("dashboard.Engine", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    host = models.ForeignKey("dashboard.Host", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    reason = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-starts_at"]
        constraints = [
            models.CheckConstraint(condition=Q(ends_at__gt=models.F("starts_at")), name="maintenance_ends_after_start")
        ]

    def __str__(self) -> str:
        return f"maintenance {self.starts_at:%Y-%m-%d %H:%M}–{self.ends_at:%H:%M} {self.engine or self.host or 'everything'}"


class Delivery(models.Model):
    """The outbox: written before sending; a worker claims a row with a conditional UPDATE."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        SENDING = "sending", "sending"
        SENT = "sent", "sent"
        FAILED = "failed", "failed"

    class Transition(models.TextChoices):
        FIRING = "firing", "firing"
        RESOLVED = "resolved", "resolved"
        RENOTIFY = "renotify", "re-notify"
        TEST = "test", "test"

    event = models.ForeignKey(AlertEvent, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.ForeignKey(NotificationChannel, on_delete=models.CASCADE, related_name="deliveries")
    transition = models.CharField(max_length=8, choices=Transition.choices)
    # Sent as Idempotency-Key: receivers drop a repeat after a lost acknowledgement.
    idempotency_key = models.CharField(max_length=120, unique=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            # The sweep: "pending rows due now" and "sending rows whose claim lapsed".
            models.Index(fields=["status", "next_attempt_at"], name="delivery_status_due"),
        ]

    def __str__(self) -> str:
        return f"{self.transition} → {self.channel.name}: {self.status}"


class DeliveryAttempt(models.Model):
    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    at = models.DateTimeField()
    ok = models.BooleanField()
    permanent = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    duration_ms = models.FloatField()

    class Meta:
        ordering = ["at", "id"]


class RuleState(models.Model):
    """A rule's memory of one subject between readings (restart times, counter samples, baselines)."""

    rule = models.CharField(max_length=40)
    subject = models.CharField(max_length=200)
    data = models.JSONField(default=dict)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["rule", "subject"], name="rulestate_rule_subject")]


class InboxMessage(models.Model):
    """A webhook delivery received by SparkOps itself (sparkops/alerts/inbox.py): the local
    channel the demo ships with, so a newcomer watches notifications arrive with nothing set up."""

    received_at = models.DateTimeField(auto_now_add=True)
    # The channel whose secret signed it (SET_NULL: the received record outlives the channel).
    channel = models.ForeignKey(
        NotificationChannel, null=True, blank=True, on_delete=models.SET_NULL, related_name="inbox_messages"
    )
    idempotency_key = models.CharField(max_length=200, blank=True)
    body = models.JSONField(default=dict)

    class Meta:
        ordering = ["-received_at", "-id"]
        constraints = [
            # A retried delivery is received once, as a real receiver should.
            models.UniqueConstraint(
                fields=["idempotency_key"], condition=~Q(idempotency_key=""), name="inboxmessage_one_per_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.idempotency_key or self.pk} at {self.received_at:%Y-%m-%d %H:%M:%S}"


# A rule of the operator's own lives in its module; imported here so Django registers it.
from .custom_model import CustomRule  # noqa: E402,F401
