from django.contrib import admin

from .models import PairRun, Profile, Repetition, Run, Sweep


@admin.register(Profile)
class ProfileAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "engine",
        "workload",
        "depth",
        "mode",
        "output_tokens",
        "reps",
        "concurrency",
        "params_hash",
    )
    list_filter = ("engine", "mode", "sampling")
    readonly_fields = ("params_hash", "created_at", "updated_at")


class RepetitionInline(admin.TabularInline):
    model = Repetition
    extra = 0
    can_delete = False
    fields = (
        "index",
        "stream",
        "ok",
        "bucket",
        "error",
        "ttft_ms",
        "decode_tokens_per_s",
        "chunks",
        "prompt_tokens",
        "cached_tokens",
        "completion_tokens",
        "reasoning_tokens",
    )
    readonly_fields = fields


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("id", "engine", "profile", "trigger", "status", "tainted", "regression", "created_at")
    list_filter = ("status", "trigger", "tainted", "regression", "engine")
    readonly_fields = ("params_hash", "created_at", "started_at", "finished_at")
    inlines = [RepetitionInline]


@admin.register(PairRun)
class PairRunAdmin(admin.ModelAdmin):
    list_display = ("id", "profile_a", "profile_b", "status", "created_at")


@admin.register(Sweep)
class SweepAdmin(admin.ModelAdmin):
    list_display = ("id", "engine", "axis", "values", "status", "stop_reason", "created_at")
    list_filter = ("status", "axis", "engine")
    readonly_fields = ("params_hash", "table", "created_at", "started_at", "finished_at")
