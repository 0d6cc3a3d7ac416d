"""The admin reads the log; it never writes it. No add, change or delete permission for
anyone, superusers included, so the admin is not a back door around append-only."""

from typing import Any

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest

from .models import Claim, Correction, Entry, EntryRevision, EvidenceLink, FlagChange, SearchDocument


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        return {}  # "delete selected" would otherwise be offered


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


class FlagInline(ReadOnlyInline):
    model = FlagChange


class ClaimInline(ReadOnlyInline):
    model = Claim


class CorrectionInline(ReadOnlyInline):
    model = Correction
    fk_name = "entry"


@admin.register(Entry)
class EntryAdmin(ReadOnlyAdmin):
    list_display = ("effective_at", "kind", "title", "author_name", "created_at")
    list_filter = ("kind", "engines")
    search_fields = ("title", "body_md")
    inlines = [FlagInline, ClaimInline, CorrectionInline]


@admin.register(Correction)
class CorrectionAdmin(ReadOnlyAdmin):
    list_display = ("corrected_at", "entry", "claim", "mark", "author_name")


@admin.register(EntryRevision)
class EntryRevisionAdmin(ReadOnlyAdmin):
    list_display = ("entry", "revised_at", "revised_by")


@admin.register(EvidenceLink)
class EvidenceLinkAdmin(ReadOnlyAdmin):
    list_display = ("kind", "url", "ref_id", "entry", "correction")


@admin.register(SearchDocument)
class SearchDocumentAdmin(ReadOnlyAdmin):
    """Derived from the entry and its corrections (the text search reads it); shown, never edited."""

    list_display = ("entry",)
    search_fields = ("document",)

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> SearchDocument | None:
        # Its primary key is a one-to-one field, which gets none of Django's integer range checks: on
        # SQLite an id past 64 bits is an OverflowError (a 500) instead of "no such row".
        try:
            return super().get_object(request, object_id, from_field)
        except OverflowError:
            return None
