from typing import Any

from django import forms
from django.contrib import admin

from .forms import CONFIG_HINT
from .models import (
    AlertEvent,
    AlertNote,
    AlertRule,
    AlertRuleOverride,
    Delivery,
    DeliveryAttempt,
    InboxMessage,
    MaintenanceWindow,
    NotificationChannel,
    Route,
    Silence,
)


class RouteInline(admin.TabularInline):
    model = Route
    extra = 0


class NotificationChannelAdminForm(forms.ModelForm):
    class Meta:
        model = NotificationChannel
        fields = "__all__"
        help_texts = {"config": CONFIG_HINT}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["config"].required = False  # {} is a config with no keys: said by clean(), not "required"

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        config = data.get("config")
        if config is not None and not isinstance(config, dict):
            self.add_error("config", "The config is a JSON object: " + CONFIG_HINT)
            return data
        if config is None:
            data["config"] = {}  # the model's clean() then names the key this kind needs
        return data


@admin.register(NotificationChannel)
class NotificationChannelAdmin(admin.ModelAdmin):
    form = NotificationChannelAdminForm
    list_display = ("name", "kind", "enabled", "health", "failing_since", "created_at")
    list_filter = ("kind", "health")
    inlines = [RouteInline]


class OverrideInline(admin.TabularInline):
    model = AlertRuleOverride
    extra = 0


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = ("key", "enabled", "severity", "renotify_s")
    inlines = [OverrideInline]


class NoteInline(admin.TabularInline):
    model = AlertNote
    extra = 0
    readonly_fields = ("at", "kind", "text", "user")


@admin.register(AlertEvent)
class AlertEventAdmin(admin.ModelAdmin):
    list_display = (
        "rule",
        "subject",
        "severity",
        "state",
        "cause",
        "started_at",
        "fired_at",
        "resolved_at",
        "acknowledged_at",
    )
    list_filter = ("state", "severity", "rule")
    search_fields = ("subject", "message")
    inlines = [NoteInline]


class AttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    extra = 0
    readonly_fields = ("at", "ok", "permanent", "error", "duration_ms")


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ("idempotency_key", "channel", "transition", "status", "attempts", "next_attempt_at", "sent_at")
    list_filter = ("status", "transition", "channel")
    inlines = [AttemptInline]


admin.site.register(Silence)
admin.site.register(MaintenanceWindow)


@admin.register(InboxMessage)
class InboxMessageAdmin(admin.ModelAdmin):
    list_display = ("received_at", "channel", "idempotency_key")
    readonly_fields = ("received_at", "channel", "idempotency_key", "body")
