from django.contrib import admin

from sparkops.measured.admin import MeasuredProfileAdmin, MeasuredRunAdmin, MeasuredUnitInline

from .models import ProbeCase, ProbeProfile, ProbeRun


@admin.register(ProbeProfile)
class ProbeProfileAdmin(MeasuredProfileAdmin):
    list_display = ("name", "engine", "kind", "tokens", "depths", "decoys", "reps", "params_hash")
    list_filter = ("kind",)
    search_fields = ("name",)


class ProbeCaseInline(MeasuredUnitInline):
    model = ProbeCase
    fields = ("index", "label", "rep", "ok", "bucket", "verdict", "prompt_tokens", "completion_tokens", "seconds")


@admin.register(ProbeRun)
class ProbeRunAdmin(MeasuredRunAdmin):
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
