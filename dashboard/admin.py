from django.contrib import admin

from .models import Engine, Host, Incident, KVPoolEntry


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = ("name", "last_report_at", "created_at")
    readonly_fields = ("last_report_at", "latest")


@admin.register(Engine)
class EngineAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "url", "unit", "host", "status", "last_poll_at", "retired_at")
    list_filter = ("kind", "status", "host", ("retired_at", admin.EmptyFieldListFilter))
    search_fields = ("name", "url", "unit")
    readonly_fields = ("status", "status_reason", "status_changed_at", "last_poll_at", "last_ok_at", "latest")

    def has_delete_permission(self, request, obj=None):
        # Engines are retired ('sparkops engine remove'), not deleted: only one that nothing
        # in the change log names may go (a typo); the other history is PROTECTed and listed.
        return obj is not None and not obj.changelog_entries.exists() and super().has_delete_permission(request, obj)


@admin.register(KVPoolEntry)
class KVPoolEntryAdmin(admin.ModelAdmin):
    list_display = ("recorded_at", "engine", "memory_share", "pool_tokens", "window", "concurrency", "source")
    list_filter = ("engine", "source")


@admin.register(Incident)
class IncidentAdmin(admin.ModelAdmin):
    list_display = ("opened_at", "engine", "unit", "trigger", "peak", "closed_at")
    list_filter = ("engine",)
