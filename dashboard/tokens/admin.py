from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from .models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are created with `sparkops token create USER` (shown once); here they are seen
    and revoked."""

    list_display = ("prefix", "user", "name", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("user__username", "name", "prefix")
    readonly_fields = ("user", "prefix", "digest", "created_at", "last_used_at")
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset:
            token.revoke()
        self.message_user(request, f"revoked {queryset.count()} token(s)", messages.SUCCESS)
