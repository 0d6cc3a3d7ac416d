from django.urls import path

from .views import api

app_name = "api"
urlpatterns = [
    path("engines/", api.engines, name="engines"),
    path("alerts/", api.alerts, name="alerts"),
    path("changelog/", api.changelog, name="changelog"),
    path("bench/runs/", api.bench_runs, name="bench-runs"),
]
