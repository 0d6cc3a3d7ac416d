from django.urls import include, path

from .views import account, audit, charts, engines, health, hosts, launchconfig, metrics, overview, pwa, unitfix

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("healthz", health.healthz, name="healthz"),
    path("livez", health.livez, name="livez"),
    path("account/tokens/", account.tokens, name="account-tokens"),
    path("account/tokens/<id:pk>/revoke/", account.token_revoke, name="account-token-revoke"),
    path("metrics", metrics.metrics, name="metrics"),
    path("engines/", engines.engine_list, name="engine-list"),
    path("engines/<str:name>/", engines.engine_detail, name="engine-detail"),
    path("engines/<str:name>/restart/", engines.engine_restart, name="engine-restart"),
    path("hosts/", hosts.host_list, name="host-list"),
    path("hosts/<str:name>/", hosts.host_detail, name="host-detail"),
    path("hosts/<str:name>/audit/", audit.host_audit, name="host-audit"),
    path("engines/<str:name>/audit/", audit.engine_audit, name="engine-audit"),
    path("engines/<str:name>/audit/fix/", unitfix.engine_unit_fix, name="engine-unit-fix"),
    path("engines/<str:name>/launch/", launchconfig.engine_launch, name="engine-launch"),
    path("coresidency/", hosts.coresidency, name="coresidency"),
    path("live/alerts/", overview.firing_alerts_partial, name="live-alerts"),
    path("live/fleet/", hosts.fleet_grid_partial, name="live-fleet"),
    path("charts/engine/<str:name>.json", charts.engine_chart_json, name="chart-engine"),
    path("charts/host/<str:name>.json", charts.host_chart_json, name="chart-host"),
    path("charts/coresidency.json", charts.coresidency_chart_json, name="chart-coresidency"),
    path("charts/overview.json", charts.overview_sparks_json, name="chart-overview"),
    path("manifest.webmanifest", pwa.manifest, name="web-manifest"),
    path("", include("sparkops.availability.urls")),
    path("", include("sparkops.explore.urls")),
]
