from django.urls import path

from sparkops.alerts import custom_views
from sparkops.availability.views import availability_api

from .views import api

app_name = "api"
urlpatterns = [
    path("engines/", api.engines, name="engines"),
    path("alerts/", api.alerts, name="alerts"),
    path("changelog/", api.changelog, name="changelog"),
    path("bench/runs/", api.bench_runs, name="bench-runs"),
    path("rules/custom/", custom_views.api_custom_rules, name="custom-rules"),
    path("rules/custom/<str:name>/", custom_views.api_custom_rule, name="custom-rule"),
    path("availability/", availability_api, name="availability"),
]
