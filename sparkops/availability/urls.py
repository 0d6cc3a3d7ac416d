from django.urls import path

from . import views

urlpatterns = [
    path("availability/", views.availability_page, name="availability"),
    path("availability.csv", views.availability_csv, name="availability-csv"),
]
