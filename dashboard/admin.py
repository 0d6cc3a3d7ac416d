from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from .forms import ids
from .models import AuditThreshold, ConfigSnapshot, Engine, EngineStart, Host, Incident, KVPoolEntry, Launch


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

    def has_delete_permission(self, request: HttpRequest, obj: Engine | None = None) -> bool:
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


@admin.register(ConfigSnapshot)
class ConfigSnapshotAdmin(admin.ModelAdmin):
    """Observed, never typed: read-only here as in the change log it feeds."""

    list_display = ("observed_at", "engine", "hash", "logged_entry_id")
    list_filter = ("engine",)
    readonly_fields = ("engine", "observed_at", "hash", "data", "previous", "logged_entry_id")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(EngineStart)
class EngineStartAdmin(admin.ModelAdmin):
    list_display = (
        "started_at",
        "engine",
        "kind",
        "active_at",
        "healthy_at",
        "compilers_max",
        "budget_s",
        "timeout_s",
        "gate",
    )
    list_filter = ("engine", "kind", "gate")


@admin.register(Launch)
class LaunchAdmin(admin.ModelAdmin):
    """Recorded by `sparkops launch` on the box: read-only here (a record, like the change log)."""

    list_display = ("started_at", "host", "engine", "kind", "user", "share", "outcome", "ready_at", "forced")
    list_filter = ("host", "kind", "outcome")
    readonly_fields = [f.name for f in Launch._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


class AuditThresholdForm(forms.ModelForm):
    class Meta:
        model = AuditThreshold
        formfield_callback = ids.formfield  # its foreign keys' ids are checked before any query
        fields = ("host", "check_key", "name", "value")

    def clean(self) -> dict[str, Any]:
        from sparkops.audit.thresholds import threshold_value

        super().clean()
        data = self.cleaned_data
        try:
            data["value"] = str(threshold_value(data.get("check_key"), data.get("name"), data.get("value", "")))
        except ValueError as exc:
            self.add_error("value", str(exc))
        return data


@admin.register(AuditThreshold)
class AuditThresholdAdmin(admin.ModelAdmin):
    """A box's audit thresholds, held to each check's type and bounds as on the audit page."""

    form = AuditThresholdForm
    list_display = ("host", "check_key", "name", "value", "updated_by", "updated_at")
    list_filter = ("host", "check_key")

    def save_model(self, request: HttpRequest, obj: AuditThreshold, form: forms.ModelForm, change: bool) -> None:
        obj.updated_by = request.user  # type: ignore[assignment]  # the admin site lets in only signed-in staff
        super().save_model(request, obj, form, change)
