from django.contrib import admin

from .models import (
    AlertEvent,
    AlertNote,
    AlertRule,
    AlertRuleOverride,
    Delivery,
    DeliveryAttempt,
    MaintenanceWindow,
    NotificationChannel,
    Route,
    Silence,
)


class RouteInline(admin.TabularInline):
    model = Route
    extra = 0


@admin.register(NotificationChannel)
class NotificationChannelAdmin(admin.ModelAdmin):
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
