from django.contrib import admin

from sparkops.measured.admin import MeasuredProfileAdmin, MeasuredRunAdmin, MeasuredUnitInline

from .models import PairRun, Profile, Repetition, Run, Sweep


@admin.register(Profile)
class ProfileAdmin(MeasuredProfileAdmin):
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


class RepetitionInline(MeasuredUnitInline):
    model = Repetition
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


@admin.register(Run)
class RunAdmin(MeasuredRunAdmin):
    list_display = ("id", "engine", "profile", "trigger", "status", "tainted", "regression", "created_at")
    list_filter = ("status", "trigger", "tainted", "regression", "engine")
    readonly_fields = ("params_hash", *MeasuredRunAdmin.readonly_fields)
    inlines = [RepetitionInline]


@admin.register(PairRun)
class PairRunAdmin(admin.ModelAdmin):
    list_display = ("id", "profile_a", "profile_b", "status", "created_at")


@admin.register(Sweep)
class SweepAdmin(admin.ModelAdmin):
    list_display = ("id", "engine", "axis", "values", "status", "stop_reason", "created_at")
    list_filter = ("status", "axis", "engine")
    readonly_fields = ("params_hash", "table", "created_at", "started_at", "finished_at")
