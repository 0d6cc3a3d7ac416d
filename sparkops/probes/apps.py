from django.apps import AppConfig


class ProbesConfig(AppConfig):
    name = "sparkops.probes"
    label = "probes"
    verbose_name = "Quality probes"

    def ready(self) -> None:
        from . import kind  # noqa: F401  (declares PROBE: the measured core then knows this kind in every process)
