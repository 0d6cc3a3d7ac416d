from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "dashboard.experiments"
    label = "experiments"
    verbose_name = "A/B experiments"
