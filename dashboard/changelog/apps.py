from django.apps import AppConfig


class ChangelogConfig(AppConfig):
    name = "dashboard.changelog"
    label = "changelog"
    verbose_name = "Change log"
