from django.contrib import admin

from .models import ProbeCase, ProbeProfile, ProbeRun


@admin.register(ProbeProfile)
class ProbeProfileAdmin(admin.ModelAdmin):
    list_display = ("name", "engine", "kind", "tokens", "depths", "decoys", "reps", "params_hash")
    list_filter = ("kind",)
    search_fields = ("name",)
    readonly_fields = ("params_hash", "created_at", "updated_at")


class ProbeCaseInline(admin.TabularInline):
    model = ProbeCase
    extra = 0
    fields = ("index", "label", "rep", "ok", "bucket", "verdict", "prompt_tokens", "completion_tokens", "seconds")
    readonly_fields = fields
    can_delete = False


@admin.register(ProbeRun)
class ProbeRunAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "kind",
        "engine",
        "profile",
        "trigger",
        "status",
        "passed",
        "headline",
        "tainted",
        "created_at",
    )
    list_filter = ("kind", "status", "trigger", "passed", "tainted")
    inlines = [ProbeCaseInline]
    readonly_fields = ("created_at", "started_at", "finished_at")
