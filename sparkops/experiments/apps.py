from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "sparkops.experiments"
    label = "experiments"
    verbose_name = "A/B experiments"
