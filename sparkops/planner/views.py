"""The planner page: each engine of a box with its share and window, the predictions (computed in
the browser by static/js/planner.js from the JSON this view embeds, the same arithmetic as
model.py), the suggestion, and "Record as a claim" (the server predicts again from the ledger;
it never writes a number the browser sent)."""

from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dashboard.models import Engine, Host
from dashboard.roles import SignedInRequest, role_required
from sparkops.changelog.forms import MAX_WINDOW
from sparkops.changelog.models import DuplicateError, Entry
from sparkops.changelog.services import entry_create

from .engine_model import NO_EARLIER_RAISE, EngineModel, PlanError
from .models import BoxSetting
from .services import box_of, engine_model, host_plan


class PlanForm(forms.Form):
    engine = forms.CharField(max_length=63)
    util = forms.FloatField(min_value=0.01, max_value=1.0, label="Memory share")
    window = forms.IntegerField(min_value=1, max_value=MAX_WINDOW, label="Window")


class BoxSettingForm(forms.ModelForm):
    class Meta:
        model = BoxSetting
        fields = ["headroom_gib", "memory_gib"]  # noqa: RUF012 (Django's Meta)
        labels = {"headroom_gib": "Headroom (GiB)", "memory_gib": "Memory (GiB, if no MemTotal)"}  # noqa: RUF012


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    hosts = list(Host.objects.order_by("name"))
    if len(hosts) == 1:
        return redirect("planner:host", name=hosts[0].name)
    return render(request, "planner/index.html", {"hosts": hosts})


@require_GET
def host_page(request: HttpRequest, name: str) -> HttpResponse:
    host = get_object_or_404(Host, name=name)
    plan = host_plan(host)
    data = {
        "host": host.name,
        "box": plan["box"],
        "engines": [
            {
                **m.as_json(),
                "retired": e.is_retired,
                "url": reverse("engine-detail", args=[e.name]),
                "latest": _latest(m),
            }
            for e in plan["engines"]
            for m in [plan["models"][e.name]]
        ],
        "held": plan["held"],
        "no_earlier_raise": NO_EARLIER_RAISE,
        "ledger_url": reverse("changelog:ledgers"),
    }
    setting = BoxSetting.objects.filter(host=host).first() or BoxSetting(host=host)
    return render(
        request,
        "planner/host.html",
        {
            "host": host,
            "plan": plan,
            "data": data,
            "box": plan["box"],
            "setting_form": BoxSettingForm(instance=setting),
        },
    )


def _latest(model: EngineModel) -> dict[str, Any] | None:
    """The engine's newest ledger row, as the page shows it for an engine it does not plan."""
    if not model.rows:
        return None
    row = model.rows[-1]
    pool = f"{row.pool_tokens:,}" if row.pool_tokens else "?"
    window = f"{row.window:,}" if row.window else "?"
    return {"id": row.id, "date": row.date, "pool_tokens": pool, "window": window}


@role_required("operator")
@require_POST
def box_setting(request: HttpRequest, name: str) -> HttpResponse:
    host = get_object_or_404(Host, name=name)
    setting = BoxSetting.objects.filter(host=host).first() or BoxSetting(host=host)
    form = BoxSettingForm(request.POST, instance=setting)
    if form.is_valid():
        form.save()
        messages.success(request, f"Planner setting of {host.name} saved.")
    else:
        errors = "; ".join(
            f"{form.fields[f].label}: {' '.join(str(m) for m in e)}" for f, e in form.errors.items() if f in form.fields
        )
        messages.error(request, f"Nothing was saved: {errors or form.non_field_errors()}")
    return redirect("planner:host", name=host.name)


@role_required("operator")
@require_POST
def record_claim(request: SignedInRequest, name: str) -> HttpResponse:
    """A change-log entry with the prediction as claims (concurrency and pool at the window), so the
    ledger row after the restart is compared with it on the entry's page."""
    host = get_object_or_404(Host, name=name)
    form = PlanForm(request.POST)
    if not form.is_valid():
        errors = "; ".join(
            f"{form.fields[f].label}: {' '.join(str(m) for m in e)}" for f, e in form.errors.items() if f in form.fields
        )
        messages.error(request, f"Nothing was recorded: {errors}")
        return redirect("planner:host", name=host.name)
    d = form.cleaned_data
    engine = Engine.objects.filter(host=host, name=d["engine"], retired_at__isnull=True).first()
    if engine is None:
        messages.error(request, f"Nothing was recorded: {d['engine']!r} is not an engine of {host.name}.")
        return redirect("planner:host", name=host.name)
    try:
        p = engine_model(engine, box_of(host)["memory_gib"]).predict(d["util"], d["window"])
    except PlanError as exc:
        messages.error(request, f"Nothing was recorded: {exc}")
        return redirect("planner:host", name=host.name)
    try:
        entry = entry_create(author=request.user, effective_at=timezone.now(), **claim_entry(engine, p))
    except DuplicateError as exc:
        messages.error(request, str(exc))
        return redirect(exc.existing.get_absolute_url())
    messages.success(request, "Recorded in the change log: the ledger row after the restart will be compared with it.")
    return redirect(entry.get_absolute_url())


def claim_entry(engine: Engine, p: dict[str, Any]) -> dict[str, Any]:
    """The fields of the change-log entry that records prediction P of ENGINE."""
    w, u = p["window"], p["util"]
    raised = p["naive_concurrency"] is not None
    conc = p["concurrency"]
    how = ""
    if raised:
        how = (
            f" (raise {p['base_window']:,} → {w:,}: naive {p['naive_concurrency']}×"
            + (
                f", corrected for {p['workspace_gib'] or '?'} GiB of workspace"
                if p["corrected_concurrency"] is not None
                else f"; {NO_EARLIER_RAISE}, range {p['concurrency_range'][0]}–{p['concurrency_range'][1]}×"
            )
            + ")"
        )
    basis = "\n".join(
        f"- [ledger row #{r['id']}](/changelog/ledgers/#kv-{r['id']}): {r['date']} {r['engine']} util {r['util']}, "
        f"{r['pool_tokens']:,} tokens at {r['window']:,}"
        for r in p["basis"]
    )
    body = (
        f"Planner prediction for `--gpu-memory-utilization {u}` and `--max-model-len {w}` on {engine.name}: "
        f"{p['pool_tokens']:,} tokens of KV pool"
        + (f" in {p['kv_gib']} GiB" if p["kv_gib"] is not None else "")
        + f", {conc}× full-length requests{how}.\n\n"
        + f"Method: {p['method']}.\n\n"
        + (f"Window raise: {p['raise_basis']}.\n\n" if p["raise_basis"] else "")
        + f"Rows it rests on:\n\n{basis}"
    )
    return {
        "kind": Entry.Kind.CLAIM,
        "title": f"Plan {engine.name}: util {u}, window {w:,} → {conc}×",
        "engines": [engine],
        "body_md": body,
        "expected_effect": f"{conc}× full-length requests at {w:,}, {p['pool_tokens']:,} tokens",
        "claims": [
            {
                "text": f"At util {u} and window {w:,}, {engine.name} serves {conc}× full-length requests{how}",
                "metric": "concurrency",
                "predicted": conc,
                "window": w,
                "engine": engine,
            },
            {
                "text": f"At util {u} and window {w:,}, {engine.name}'s KV pool holds {p['pool_tokens']:,} tokens",
                "metric": "pool_tokens",
                "predicted": p["pool_tokens"],
                "window": w,
                "engine": engine,
            },
        ],
    }
