from django.urls import path

from . import views

app_name = "planner"
urlpatterns = [
    path("", views.index, name="index"),
    path("<str:name>/", views.host_page, name="host"),
    path("<str:name>/setting/", views.box_setting, name="setting"),
    path("<str:name>/claim/", views.record_claim, name="claim"),
]
