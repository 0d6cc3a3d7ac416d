from django.urls import path

from . import views

app_name = "changelog"
urlpatterns = [
    path("", views.index, name="index"),
    path("<int:pk>/", views.index, name="entry"),
    path("ledgers/", views.index, name="ledgers"),
]
