from django.apps import AppConfig
from django.urls import register_converter


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "SparkOps"

    def ready(self):

        from sparkops import checks  # noqa: F401  (registers system checks)

        from .forms.ids import IdConverter

        register_converter(IdConverter, "id")  # `<id:pk>` in every URL pattern that takes a row id
