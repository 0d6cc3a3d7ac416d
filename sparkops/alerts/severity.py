"""An alert's severity: the choices a rule setting, an event, a route and an operator's own rule
store, and their order. Its own module, below the models that store one (alerts/models.py,
alerts/custom_model.py), so that neither imports the other for it."""

from django.db import models


class Severity(models.TextChoices):
    INFO = "info", "info"
    WARNING = "warning", "warning"
    CRITICAL = "critical", "critical"


SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}
