"""Sweep pages: start one, watch its cells fill in live, its chart, exports, attach to the change log."""

import json

from django import forms
from django.contrib import messages
from django.db import transaction
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from dashboard.forms.ids import IdChoiceField
from dashboard.models import Engine
from dashboard.roles import role_required
from sparkops.changelog.models import Entry
from sparkops.poller.fleet import BoxUnreachable, require_reachable

from .models import MAX_CONCURRENCY, MAX_DEPTH, MAX_OUTPUT, MAX_REPS, Profile, Run, Sweep
from .spec import RunSpec
from .sweep import SweepError, parse_values, sweep_create, sweep_validate
from .sweep_export import chart_data, sweep_csv, sweep_markdown, sweep_summary
from .sweep_log import AttachError, sweep_attach
from .tasks import bench_sweep_execute


class SweepForm(forms.Form):
    engine = IdChoiceField(queryset=Engine.objects.filter(retired_at__isnull=True).order_by("name"))
    axis = forms.ChoiceField(choices=Sweep.Axis.choices, initial="concurrency")
    values = forms.CharField(max_length=200, initial="1,2,4,8", help_text="Rising, comma-separated, e.g. 1,2,4,8")
    depth = forms.IntegerField(
        min_value=0, max_value=MAX_DEPTH, initial=0, help_text="Prompt tokens (fixed, for a concurrency sweep)"
    )
    concurrency = forms.IntegerField(
        min_value=1, max_value=MAX_CONCURRENCY, initial=1, help_text="Streams (fixed, for a depth sweep)"
    )
    output_tokens = forms.IntegerField(min_value=2, max_value=MAX_OUTPUT, initial=512, help_text="Pinned")
    reps = forms.IntegerField(min_value=1, max_value=MAX_REPS, initial=3, help_text="Per cell, odd")
    mode = forms.ChoiceField(choices=Profile.Mode.choices, initial="cold")
    force = forms.BooleanField(required=False, help_text="Allow depth > 0 with concurrency > 1")
    error_threshold = forms.FloatField(
        min_value=0, max_value=1, initial=0.2, help_text="Stop when a cell's failed share passes this"
    )

    def clean(self):
        super().clean()
        data = self.cleaned_data  # what super().clean() returns; the stubs allow None
        if self.errors:
            return data
        try:
            data["values"] = parse_values(data["values"], axis=data["axis"])
        except SweepError as exc:
            self.add_error("values", str(exc))
            return data
        engine = data["engine"]
        data["spec"] = RunSpec(
            engine_name=engine.name,
            engine_kind=engine.kind,
            base_url=engine.base_url,
            depth=data["depth"],
            concurrency=data["concurrency"],
            mode=data["mode"],
            output_tokens=data["output_tokens"],
            reps=data["reps"],
            force=data["force"],
        )
        reason = sweep_validate(axis=data["axis"], values=data["values"], spec=data["spec"])
        if reason:
            self.add_error(None, reason)
        return data


def sweep_enqueue(**kw):
    """Create and queue on the worker of the engine's own box (after commit); `BoxUnreachable` when
    that worker stopped reporting, and nothing is created."""
    with transaction.atomic():  # the input's errors first; a box that cannot take it keeps no row
        sweep = sweep_create(**kw)
        require_reachable(sweep.engine.host)
    queue = sweep.engine.host.queue
    transaction.on_commit(lambda: bench_sweep_execute.apply_async(args=[sweep.pk], queue=queue))
    return sweep


@role_required("operator")
def sweep_new(request):
    form = SweepForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        try:
            sweep = sweep_enqueue(
                engine=d["engine"],
                axis=d["axis"],
                values=d["values"],
                spec=d["spec"],
                user=request.user,
                error_threshold=d["error_threshold"],
            )
        except BoxUnreachable as exc:
            form.add_error(None, f"Not queued: {exc}")
        else:
            messages.success(request, f"Sweep {sweep.pk} queued.")
            return redirect("bench:sweep", pk=sweep.pk)
    return render(request, "bench/sweep_form.html", {"form": form})


def rows_for(sweep):
    """One row per axis value: the finished cell, the running one, or what is left."""
    done = {row["value"]: row for row in sweep.table}
    running = sweep.cells.filter(status__in=(Run.Status.QUEUED, Run.Status.RUNNING)).values_list("sweep_value", "pk")
    running = dict(running)
    rows = []
    for value in sweep.values:
        if value in done:
            rows.append({"value": value, "state": "done", "cell": done[value]})
        elif value in running:
            rows.append({"value": value, "state": "running", "run": running[value]})
        else:
            stopped = sweep.status not in (Run.Status.QUEUED, Run.Status.RUNNING)
            rows.append({"value": value, "state": "not run" if stopped else "waiting"})
    return rows


def sweep_detail(request, pk):
    sweep = get_object_or_404(Sweep.objects.select_related("engine", "created_by"), pk=pk)
    live = sweep.status in (Run.Status.QUEUED, Run.Status.RUNNING)
    if request.GET.get("format") == "progress":  # sweep.js catches up with this when its socket (re)opens
        return JsonResponse({"sweep": sweep.pk, "status": sweep.status, "cells": len(sweep.table)})
    entries = Entry.objects.filter(locked_at__gt=timezone.now()).order_by("-created_at")[:20]  # still editable
    same = Sweep.objects.filter(params_hash=sweep.params_hash).exclude(pk=sweep.pk).order_by("-created_at")[:10]
    return render(
        request,
        "bench/sweep_detail.html",
        {
            "sweep": sweep,
            "rows": rows_for(sweep),
            "chart": chart_data(sweep),
            "summary": sweep_summary(sweep),
            "live": live,
            "entries": entries,
            "same_hash": same,
        },
    )


def sweep_export(request, pk, fmt):  # noqa: ARG001 (a view's signature)
    sweep = get_object_or_404(Sweep.objects.select_related("engine"), pk=pk)
    name = f"sweep-{sweep.pk}-{sweep.axis}"
    if fmt == "md":
        body, ctype = sweep_markdown(sweep), "text/markdown; charset=utf-8"
    elif fmt == "csv":
        body, ctype = sweep_csv(sweep), "text/csv; charset=utf-8"
    elif fmt == "json":
        body, ctype = json.dumps(sweep_summary(sweep), indent=2), "application/json"
    else:
        raise Http404("Export a sweep as .md, .csv or .json")
    response = HttpResponse(body, content_type=ctype)
    response["Content-Disposition"] = f'inline; filename="{name}.{fmt}"'
    return response


@role_required("operator")
@require_POST
def sweep_attach_view(request, pk):
    sweep = get_object_or_404(Sweep.objects.select_related("engine"), pk=pk)
    entry = None
    if request.POST.get("entry"):
        entry = Entry.objects.filter(pk=request.POST["entry"]).first() if request.POST["entry"].isdigit() else None
        if entry is None:
            messages.error(request, f"No change-log entry {request.POST['entry']!r}; nothing was attached.")
            return redirect("bench:sweep", pk=sweep.pk)
    try:
        entry = sweep_attach(sweep=sweep, entry=entry, user=request.user)
    except AttachError as exc:
        messages.error(request, f"Not attached: {exc}.")
        return redirect("bench:sweep", pk=sweep.pk)
    messages.success(request, f"Attached to change-log entry #{entry.pk}: {len(sweep.table)} runs as evidence.")
    return redirect("bench:sweep", pk=sweep.pk)


@role_required("operator")
@require_POST
def sweep_again(request, pk):
    """The same definition (engine, axis, values, fixed parameters: the same hash) queued again."""
    old = get_object_or_404(Sweep.objects.select_related("engine"), pk=pk)
    if old.engine.is_retired:
        messages.error(request, f"{old.engine.name} is retired; nothing was queued.")
        return redirect("bench:sweep", pk=old.pk)
    try:
        sweep = sweep_enqueue(
            engine=old.engine,
            axis=old.axis,
            values=old.values,
            spec=RunSpec.from_dict(old.base),
            user=request.user,
            error_threshold=old.error_threshold,
        )
    except BoxUnreachable as exc:
        messages.error(request, f"Not queued: {exc}")
        return redirect("bench:sweep", pk=old.pk)
    messages.success(request, f"Sweep {sweep.pk} queued (the same hash as sweep {old.pk}).")
    return redirect("bench:sweep", pk=sweep.pk)
