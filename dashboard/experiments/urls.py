from django.urls import path

from . import views

app_name = "experiments"
urlpatterns = [
    path("", views.index, name="index"),
    path("new/", views.create, name="new"),
    path("<int:pk>/", views.detail, name="detail"),
    path("<int:pk>/continue/", views.resume, name="continue"),
    path("<int:pk>/record/", views.record, name="record"),
]
