from django.urls import path

from . import views

app_name = "experiments"
urlpatterns = [
    path("", views.index, name="index"),
    path("new/", views.create, name="new"),
    path("<id:pk>/", views.detail, name="detail"),
    path("<id:pk>/continue/", views.resume, name="continue"),
    path("<id:pk>/record/", views.record, name="record"),
]
