"""A rule of the operator's own (issue 51): a threshold on one stored series, e.g. "kv_cache_usage
of vllm-main above 0.95 for 300 s → warning". Its definition is a row; `alerts/custom.py` makes it
a rule the evaluation runs like the built-in ones."""

from typing import ClassVar

from django.core.validators import MaxValueValidator
from django.db import models
from django.db.models import Q

from dashboard.names import NameValidator

from .severity import Severity

# An event's, a route's and a silence's rule key is 40 characters: "custom." + the name fits.
KEY_PREFIX = "custom."
NAME_MAX = 40 - len(KEY_PREFIX)
FOR_MAX_S = 30 * 86400  # as the built-in rules' durations (rules/base.py MAX_SPAN_S)


class CustomRule(models.Model):
    class Scope(models.TextChoices):
        ENGINE = "engine", "engine"
        HOST = "host", "host"

    class Comparator(models.TextChoices):
        GT = ">", "above (>)"
        GE = ">=", "at or above (>=)"
        LT = "<", "below (<)"
        LE = "<=", "at or below (<=)"

    name = models.CharField(max_length=NAME_MAX, unique=True, validators=[NameValidator()])
    scope = models.CharField(max_length=6, choices=Scope.choices, default=Scope.ENGINE)
    # One engine or host; blank: every engine (or every host).
    engine = models.ForeignKey("dashboard.Engine", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    host = models.ForeignKey("dashboard.Host", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    # A Series.metric name, e.g. "kv_cache_usage" (engine) or "gpu0.temperature_c" (host).
    metric = models.CharField(max_length=80)
    comparator = models.CharField(max_length=2, choices=Comparator.choices, default=Comparator.GT)
    threshold = models.FloatField()
    for_s = models.PositiveIntegerField(default=0, validators=[MaxValueValidator(FOR_MAX_S)])
    severity = models.CharField(max_length=8, choices=Severity.choices, default=Severity.WARNING)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "alerts"
        ordering: ClassVar = ["name"]
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=Q(scope="engine", host__isnull=True) | Q(scope="host", engine__isnull=True),
                name="customrule_subject_matches_scope",
            ),
        ]

    def __str__(self) -> str:
        return self.key

    @property
    def key(self) -> str:
        """The rule key its events, routes and silences carry."""
        return KEY_PREFIX + self.name
