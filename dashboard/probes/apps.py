from django.apps import AppConfig


class ProbesConfig(AppConfig):
    name = "dashboard.probes"
    label = "probes"
    verbose_name = "Quality probes"
