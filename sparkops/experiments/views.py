"""Experiment pages: the list, a new experiment, one experiment (arms, difference, the alternated
repetitions, the verdict), continue after a restart, record the verdict."""

from typing import Any

from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from dashboard.roles import SignedInRequest, role_required
from sparkops.benchmarks.models import Run
from sparkops.poller.fleet import BoxUnreachable, require_reachable

from .create import ExperimentError, experiment_continue, experiment_create, experiment_enqueue
from .forms import ExperimentForm
from .models import Experiment
from .record import experiment_record
from .stats import FIGURES
from .verdict import experiment_summary

LIVE = (Experiment.Status.QUEUED, Experiment.Status.RUNNING)


def index(request: HttpRequest) -> HttpResponse:
    experiments = Experiment.objects.select_related("engine_a", "engine_b")[:100]
    return render(request, "experiments/index.html", {"experiments": experiments})


@role_required("operator")
def create(request: SignedInRequest) -> HttpResponse:
    form = ExperimentForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        try:
            with transaction.atomic():  # the input's errors first; a box that cannot take it keeps no rows
                experiment = experiment_create(
                    name=d["name"],
                    engine_a=d["engine_a"],
                    engine_b=d["engine_b"],
                    workload={"depth": d["depth"], "output_tokens": d["output_tokens"], "mode": d["mode"]},
                    reps=d["reps"],
                    flags=form.flag_list(),
                    probe=d["probe"],
                    user=request.user,
                )
                require_reachable(d["engine_a"].host)
        except (ExperimentError, BoxUnreachable) as exc:
            form.add_error(None, str(exc))
        else:
            experiment_enqueue(experiment=experiment)
            messages.success(request, f"Experiment {experiment.pk} queued.")
            return redirect("experiments:detail", pk=experiment.pk)
    return render(request, "experiments/new.html", {"form": form})


def _progress(experiment: Experiment) -> dict[str, Any]:
    statuses = list(experiment.slots.values_list("run__status", flat=True))
    done = sum(1 for s in statuses if s not in (None, Run.Status.QUEUED, Run.Status.RUNNING))
    return {"experiment": experiment.pk, "status": experiment.status, "done": done, "total": len(statuses)}


def detail(request: HttpRequest, pk: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment.objects.select_related("engine_a", "engine_b", "created_by"), pk=pk)
    if request.GET.get("format") == "progress":  # experiment.js catches up with this when its socket opens
        return JsonResponse(_progress(experiment))
    finished = experiment.status in (Experiment.Status.DONE, Experiment.Status.FAILED) and experiment.verdict
    summary = experiment.verdict if finished else experiment_summary(experiment=experiment)
    return render(
        request,
        "experiments/detail.html",
        {
            "experiment": experiment,
            "s": summary,
            "progress": _progress(experiment),
            "live": experiment.status in LIVE,
            "finished": bool(finished),
            # the database stores the figures as JSON with its keys sorted: decode first, as the verdict reads
            "figures": [(key, summary["figures"][key]) for key, _, _ in FIGURES if key in summary["figures"]],
        },
    )


@role_required("operator")
@require_POST
def resume(request: HttpRequest, pk: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment.objects.select_related("engine_a__host"), pk=pk)
    try:
        experiment_continue(experiment=experiment)
    except (ExperimentError, BoxUnreachable) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, "Continuing: both arms' configurations are read again before the next repetition.")
    return redirect("experiments:detail", pk=experiment.pk)


@role_required("operator")
@require_POST
def record(request: SignedInRequest, pk: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment.objects.select_related("engine_a", "engine_b"), pk=pk)
    try:
        entry = experiment_record(experiment=experiment, user=request.user)
    except ExperimentError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Verdict recorded as change-log entry {entry.pk}.")
    return redirect("experiments:detail", pk=experiment.pk)
