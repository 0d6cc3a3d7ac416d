from django.apps import AppConfig


class BenchConfig(AppConfig):
    name = "sparkops.benchmarks"
    label = "bench"
    verbose_name = "Benchmarks"

    def ready(self) -> None:
        from . import kind  # noqa: F401  (declares BENCH: the measured core then knows this kind in every process)
