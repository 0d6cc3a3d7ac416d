from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "SparkOps"

    def ready(self):
        from sparkops import checks  # noqa: F401  (registers system checks)
