from django.urls import path

from . import views

urlpatterns = [
    path("explore/", views.explore_page, name="explore"),
    path("explore/data.json", views.explore_data, name="explore-data"),
]
