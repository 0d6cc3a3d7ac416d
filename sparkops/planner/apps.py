from django.apps import AppConfig


class PlannerConfig(AppConfig):
    name = "sparkops.planner"
    label = "planner"
    verbose_name = "Capacity planner"
