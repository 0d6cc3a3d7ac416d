from django.urls import path

from . import ledger_views, views

app_name = "changelog"
urlpatterns = [
    path("", views.index, name="index"),
    path("new/", views.entry_new, name="new"),
    path("export/", views.export, name="export"),
    path("import/", views.log_import, name="import"),
    path("claims/", views.claims, name="claims"),
    path("<id:pk>/", views.entry_detail, name="entry"),
    path("<id:pk>/edit/", views.entry_edit_view, name="edit"),
    path("<id:pk>/correct/", views.correction_new, name="correct"),
    path("ledgers/", ledger_views.ledgers, name="ledgers"),
    path("ledgers/kvpool/add/", ledger_views.kvpool_add, name="kvpool-add"),
    path("ledgers/incidents/<id:pk>/close/", ledger_views.incident_close, name="incident-close"),
    path("ledgers/<str:ledger>.<str:fmt>", ledger_views.ledger_export, name="ledger-export"),
]
