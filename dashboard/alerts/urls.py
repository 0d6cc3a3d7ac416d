from django.urls import path

from . import views

app_name = "alerts"
urlpatterns = [
    path("", views.index, name="index"),
    path("<int:pk>/", views.detail, name="detail"),
    path("<int:pk>/ack", views.ack, name="ack"),
    path("<int:pk>/silence", views.silence, name="silence"),
    path("channels/", views.channels, name="channels"),
    path("channels/<int:pk>/test", views.channel_test, name="channel-test"),
    path("rules/", views.rules, name="rules"),
    path("rules/<str:key>/", views.rule_edit, name="rule-edit"),
]
