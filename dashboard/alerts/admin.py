from django.contrib import admin

from .models import NotificationChannel


@admin.register(NotificationChannel)
class NotificationChannelAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "enabled", "health", "created_at")
    list_filter = ("kind", "health")
