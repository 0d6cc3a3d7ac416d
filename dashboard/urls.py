from django.urls import path

from .views import engines, health, overview

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("healthz", health.healthz, name="healthz"),
    path("engines/", engines.engine_list, name="engine-list"),
    path("engines/<str:name>/", engines.engine_detail, name="engine-detail"),
]
