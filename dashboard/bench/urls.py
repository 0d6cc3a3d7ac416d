from django.urls import path

from . import views

app_name = "bench"
urlpatterns = [
    path("", views.index, name="index"),
]
