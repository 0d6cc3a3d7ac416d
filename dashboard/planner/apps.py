from django.apps import AppConfig


class PlannerConfig(AppConfig):
    name = "dashboard.planner"
    label = "planner"
    verbose_name = "Capacity planner"
