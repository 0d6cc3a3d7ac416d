"""Benchmark pages: profiles, a profile's trend, runs (live progress), compare, pairs."""

from django.contrib import messages
from django.db import transaction
from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from dashboard.measured.services import profile_cron, profile_save, schedule_initial
from dashboard.params import ParamError, int_param
from dashboard.roles import role_required

from .forms import PairForm, ProfileForm
from .models import PairRun, Profile, Run, Sweep
from .pair import pair_create
from .schedule import profile_set_schedule
from .selectors import profile_trend, runs_for_compare
from .services import run_enqueue, run_summary
from .tasks import bench_pair_execute

RECENT = 30


def index(request):
    profiles = Profile.objects.select_related("engine", "schedule", "schedule__crontab")
    runs = Run.objects.select_related("engine", "profile")[:RECENT]
    pairs = PairRun.objects.select_related("profile_a", "profile_b")[:10]
    sweeps = Sweep.objects.select_related("engine")[:10]
    return render(
        request,
        "bench/index.html",
        {"profiles": profiles, "runs": runs, "pairs": pairs, "pair_form": PairForm(), "sweeps": sweeps},
    )


@role_required("operator")
def profile_create(request):
    form = ProfileForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        profile = profile_save(form=form, user=request.user, set_schedule=profile_set_schedule)
        messages.success(request, f"Profile {profile.name} saved.")
        return redirect("bench:profile", pk=profile.pk)
    return render(request, "bench/profile_form.html", {"form": form})


@role_required("operator")
def profile_edit(request, pk):
    profile = get_object_or_404(Profile, pk=pk)
    form = ProfileForm(request.POST or None, instance=profile, **schedule_initial(profile))
    if request.method == "POST" and form.is_valid():
        profile_save(form=form, user=request.user, set_schedule=profile_set_schedule)
        messages.success(request, f"Profile {profile.name} saved.")
        return redirect("bench:profile", pk=profile.pk)
    return render(request, "bench/profile_form.html", {"form": form, "profile": profile})


def profile_detail(request, pk):
    profile = get_object_or_404(Profile.objects.select_related("engine", "schedule"), pk=pk)
    runs = profile.runs.select_related("engine")[:50]
    return render(
        request,
        "bench/profile_detail.html",
        {"profile": profile, "runs": runs, "trend": profile_trend(profile=profile), "cron": profile_cron(profile)},
    )


@role_required("operator")
@require_POST
def profile_run(request, pk):
    profile = get_object_or_404(Profile.objects.select_related("engine"), pk=pk)
    run = run_enqueue(profile=profile, user=request.user)
    messages.success(request, f"Run {run.pk} queued.")
    return redirect("bench:run", pk=run.pk)


def run_detail(request, pk):
    run = get_object_or_404(Run.objects.select_related("engine", "profile", "created_by"), pk=pk)
    if request.GET.get("format") == "progress":  # run.js catches up with this when its socket (re)opens
        return JsonResponse(run.progress_payload())
    return render(
        request,
        "bench/run_detail.html",
        {
            "run": run,
            "reps": run.repetitions.all(),
            "summary": run_summary(run),
            "live": run.status in (Run.Status.QUEUED, Run.Status.RUNNING),
        },
    )


def compare(request):
    if not request.GET.get("a") and not request.GET.get("b"):
        return render(request, "bench/compare.html", {"error": "Pick two runs to compare (?a=RUN&b=RUN)."})
    try:
        a, b = (int_param(request.GET, key, required=True) for key in ("a", "b"))
    except ParamError as exc:
        return render(
            request, "bench/compare.html", {"error": f"Pick two runs to compare (?a=RUN&b=RUN): {exc}"}, status=400
        )
    run_a, run_b = runs_for_compare(a=a, b=b)
    if run_a is None or run_b is None:
        raise Http404("no such run")
    rows = _compare_rows(run_summary(run_a), run_summary(run_b))
    same = run_a.params_hash == run_b.params_hash
    return render(request, "bench/compare.html", {"a": run_a, "b": run_b, "rows": rows, "same_hash": same})


def _compare_rows(sa, sb):
    rows = []
    for name in (
        "ttft_ms",
        "first_answer_ms",
        "decode_tokens_per_s",
        "prompt_tokens",
        "cached_tokens",
        "completion_tokens",
        "reasoning_tokens",
        "chunks",
    ):
        ma, mb = sa[name].get("median"), sb[name].get("median")
        change = None if ma in (None, 0) or mb is None else 100.0 * (mb - ma) / ma
        rows.append({"name": name, "a": sa[name], "b": sb[name], "change": change})
    return rows


@role_required("operator")
@require_POST
def pair_start(request):
    form = PairForm(request.POST)
    if not form.is_valid():
        messages.error(request, "; ".join(str(e) for errs in form.errors.values() for e in errs))
        return redirect("bench:index")
    pair = pair_create(
        profile_a=form.cleaned_data["profile_a"], profile_b=form.cleaned_data["profile_b"], user=request.user
    )

    queue = pair.profile_a.engine.host.queue  # both engines of a pair share one box
    transaction.on_commit(lambda: bench_pair_execute.apply_async(args=[pair.pk], queue=queue))
    return redirect("bench:pair", pk=pair.pk)


def pair_detail(request, pk):
    pair = get_object_or_404(PairRun.objects.select_related("profile_a__engine", "profile_b__engine"), pk=pk)
    return render(request, "bench/pair_detail.html", {"pair": pair, "runs": pair.runs.select_related("engine")})
