from django.urls import path

from . import views

app_name = "probes"
urlpatterns = [
    path("", views.index, name="index"),
    path("profiles/new/", views.profile_create, name="profile-new"),
    path("profiles/<int:pk>/", views.profile_detail, name="profile"),
    path("profiles/<int:pk>/edit/", views.profile_edit, name="profile-edit"),
    path("profiles/<int:pk>/run/", views.profile_run, name="profile-run"),
    path("runs/<int:pk>/", views.run_detail, name="run"),
]
