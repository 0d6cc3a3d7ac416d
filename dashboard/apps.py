from django.apps import AppConfig
from django.urls import register_converter


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "SparkOps"

    def ready(self) -> None:
        from sparkops import celery, checks  # noqa: F401  (the Celery app @shared_task binds to; system checks)

        from .converters import IdConverter

        register_converter(IdConverter, "id")  # `<id:pk>` in every URL pattern that takes a row id
