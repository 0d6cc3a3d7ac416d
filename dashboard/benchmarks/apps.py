from django.apps import AppConfig


class BenchConfig(AppConfig):
    name = "dashboard.bench"
    label = "bench"
    verbose_name = "Benchmarks"
