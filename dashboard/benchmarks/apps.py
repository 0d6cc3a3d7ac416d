from django.apps import AppConfig


class BenchConfig(AppConfig):
    name = "dashboard.benchmarks"
    label = "bench"
    verbose_name = "Benchmarks"
