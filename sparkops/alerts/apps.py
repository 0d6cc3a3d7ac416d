from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "sparkops.alerts"
    label = "alerts"
    verbose_name = "Alerts"
