from django.contrib import admin

from .models import Experiment, Slot


class SlotInline(admin.TabularInline):
    model = Slot
    extra = 0
    fields = ("order", "arm", "run", "snapshot_a", "snapshot_b", "valid", "invalid_reason")
    raw_id_fields = ("run", "snapshot_a", "snapshot_b")


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "engine_a", "engine_b", "mode", "reps", "status", "created_at")
    list_filter = ("status", "mode")
    search_fields = ("name",)
    raw_id_fields = ("engine_a", "engine_b", "created_by")
    readonly_fields = ("workload_hash", "verdict", "entry_id", "created_at", "finished_at")
    inlines = [SlotInline]


@admin.register(Slot)
class SlotAdmin(admin.ModelAdmin):
    list_display = ("experiment", "order", "arm", "run", "valid")
    list_filter = ("valid", "arm")
    raw_id_fields = ("experiment", "run", "snapshot_a", "snapshot_b")
