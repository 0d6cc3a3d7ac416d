"""Probe pages: profiles, a profile's trend and table, runs (cases and the scored result)."""

from django.contrib import messages
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from dashboard.measured.services import profile_cron, profile_save, schedule_initial
from dashboard.roles import role_required

from .forms import ProbeProfileForm
from .models import ProbeProfile, ProbeRun
from .schedule import probe_set_schedule
from .selectors import needle_table, profile_trend
from .services import probe_run_enqueue

RECENT = 30


def index(request):
    profiles = ProbeProfile.objects.select_related("engine", "schedule", "schedule__crontab")
    runs = ProbeRun.objects.select_related("engine", "profile")[:RECENT]
    return render(request, "probes/index.html", {"profiles": profiles, "runs": runs})


@role_required("operator")
def profile_create(request):
    form = ProbeProfileForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        profile = profile_save(form=form, user=request.user, set_schedule=probe_set_schedule)
        messages.success(request, f"Probe {profile.name} saved.")
        return redirect("probes:profile", pk=profile.pk)
    return render(request, "probes/profile_form.html", {"form": form})


@role_required("operator")
def profile_edit(request, pk):
    profile = get_object_or_404(ProbeProfile, pk=pk)
    form = ProbeProfileForm(request.POST or None, instance=profile, **schedule_initial(profile))
    if request.method == "POST" and form.is_valid():
        profile_save(form=form, user=request.user, set_schedule=probe_set_schedule)
        messages.success(request, f"Probe {profile.name} saved.")
        return redirect("probes:profile", pk=profile.pk)
    return render(request, "probes/profile_form.html", {"form": form, "profile": profile})


def profile_detail(request, pk):
    profile = get_object_or_404(ProbeProfile.objects.select_related("engine", "schedule__crontab"), pk=pk)
    context = {
        "profile": profile,
        "runs": profile.runs.select_related("engine", "profile")[:50],
        "trend": profile_trend(profile=profile),
        "cron": profile_cron(profile),
        "table": needle_table(profile=profile) if profile.kind == "needle" else [],
        "depths": profile.spec().depths,
    }
    return render(request, "probes/profile_detail.html", context)


@role_required("operator")
@require_POST
def profile_run(request, pk):
    profile = get_object_or_404(ProbeProfile.objects.select_related("engine__host"), pk=pk)
    run = probe_run_enqueue(profile=profile, user=request.user)
    messages.success(request, f"Probe run {run.pk} queued.")
    return redirect("probes:run", pk=run.pk)


def run_detail(request, pk):
    run = get_object_or_404(ProbeRun.objects.select_related("engine", "profile", "created_by"), pk=pk)
    if request.GET.get("format") == "progress":  # run.js catches up with this when its socket (re)opens
        return JsonResponse(run.progress_payload())
    context = {
        "run": run,
        "cases": run.cases.all(),
        "live": run.status in (ProbeRun.Status.QUEUED, ProbeRun.Status.RUNNING),
        "depths": (run.result or {}).get("depths") or (run.config.get("params") or {}).get("depths") or [],
    }
    return render(request, "probes/run_detail.html", context)
