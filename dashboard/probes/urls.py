from django.urls import path

from . import views

app_name = "probes"
urlpatterns = [
    path("", views.index, name="index"),
    path("profiles/new/", views.profile_create, name="profile-new"),
    path("profiles/<id:pk>/", views.profile_detail, name="profile"),
    path("profiles/<id:pk>/edit/", views.profile_edit, name="profile-edit"),
    path("profiles/<id:pk>/run/", views.profile_run, name="profile-run"),
    path("runs/<id:pk>/", views.run_detail, name="run"),
]
