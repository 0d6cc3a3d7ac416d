"""The planner's one setting per box: the headroom the operator keeps free, and (rarely) the
box's memory when the poller has no reading of it."""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models


class BoxSetting(models.Model):
    host = models.OneToOneField("dashboard.Host", on_delete=models.CASCADE, related_name="planner_setting")
    headroom_gib = models.FloatField(
        default=0.0,
        validators=[MinValueValidator(0), MaxValueValidator(1024**2)],
        help_text="GiB the planner keeps free on this box (the field report ran with 20 GiB).",
    )
    memory_gib = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(1024**2)],
        help_text="The box's memory when the poller has no MemTotal reading; empty: MemTotal.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.host}: headroom {self.headroom_gib} GiB"
