"""The admin every measured kind's models share: a profile's hash and times read-only, a run's times
read-only, and its units of work (repetitions, cases) inline, read-only. A kind's admin.py subclasses
these with its columns and filters and registers its models."""

from typing import Any, ClassVar

from django.contrib import admin
from django.http import HttpRequest


class MeasuredProfileAdmin(admin.ModelAdmin):
    readonly_fields: ClassVar[tuple[str, ...]] = ("params_hash", "created_at", "updated_at")


class MeasuredRunAdmin(admin.ModelAdmin):
    readonly_fields: ClassVar[tuple[str, ...]] = ("created_at", "started_at", "finished_at")


class MeasuredUnitInline(admin.TabularInline):
    """A run's units of work as measured: none added, changed or deleted here."""

    extra = 0
    can_delete = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.fields
