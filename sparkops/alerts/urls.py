from django.urls import path

from . import custom_views, inbox_views, views

app_name = "alerts"
urlpatterns = [
    path("", views.index, name="index"),
    path("inbox/", inbox_views.inbox, name="inbox"),
    path("inbox/receive/", inbox_views.receive, name="inbox-receive"),
    path("<id:pk>/", views.detail, name="detail"),
    path("<id:pk>/ack", views.ack, name="ack"),
    path("<id:pk>/silence", views.silence, name="silence"),
    path("channels/", views.channels, name="channels"),
    path("channels/new", views.channel_new, name="channel-new"),
    path("channels/<id:pk>/test", views.channel_test, name="channel-test"),
    path("channels/<id:pk>/routes", views.channel_routes, name="channel-routes"),
    path("silences/", views.silences, name="silences"),
    path("silences/<id:pk>/end", views.silence_end, name="silence-end"),
    path("maintenance/new", views.maintenance_new, name="maintenance-new"),
    path("maintenance/<id:pk>/end", views.maintenance_end, name="maintenance-end"),
    path("rules/", views.rules, name="rules"),
    path("rules/custom/new", custom_views.custom_rule_new, name="custom-rule-new"),
    path("rules/custom/<str:name>/remove", custom_views.custom_rule_delete, name="custom-rule-remove"),
    path("rules/custom/<str:name>/switch", custom_views.custom_rule_switch, name="custom-rule-switch"),
    path("rules/<str:key>/", views.rule_edit, name="rule-edit"),
]
