from django.urls import path

from . import rate_views, sweep_views, views

app_name = "bench"
urlpatterns = [
    *views.PAGES.urls(),
    path("compare/", views.compare, name="compare"),
    path("pairs/new/", views.pair_start, name="pair-new"),
    path("pairs/<id:pk>/", views.pair_detail, name="pair"),
    path("sweeps/new/", sweep_views.sweep_new, name="sweep-new"),
    path("sweeps/<id:pk>/", sweep_views.sweep_detail, name="sweep"),
    path("sweeps/<id:pk>/export.<str:fmt>", sweep_views.sweep_export, name="sweep-export"),
    path("sweeps/<id:pk>/attach/", sweep_views.sweep_attach_view, name="sweep-attach"),
    path("sweeps/<id:pk>/again/", sweep_views.sweep_again, name="sweep-again"),
    path("rate/new/", rate_views.rate_new, name="rate-new"),
]
