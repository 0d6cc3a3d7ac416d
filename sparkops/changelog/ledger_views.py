"""Ledger pages: KV-pool table + chart + add-row form, incident table + close form, exports."""

from typing import Any

from django.contrib import messages
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard.models import Incident, KVPoolEntry
from dashboard.roles import SignedInRequest, role_required

from .forms import IncidentCloseForm, KVPoolEntryForm
from .ledgers import export_ledger, pool_chart_data
from .services import entry_link_incidents


def _ledger_context(kv_form: KVPoolEntryForm | None = None) -> dict[str, Any]:
    return {
        "kv_rows": KVPoolEntry.objects.select_related("engine").order_by("-recorded_at", "-id"),
        "incidents": Incident.objects.select_related("engine").prefetch_related("changelog_entries"),
        "chart": pool_chart_data(),
        "kv_form": kv_form
        or KVPoolEntryForm(initial={"recorded_at": timezone.localtime().replace(second=0, microsecond=0)}),
    }


@require_GET
def ledgers(request: HttpRequest) -> HttpResponse:
    return render(request, "changelog/ledgers.html", _ledger_context())


@role_required("operator")
@require_POST
def kvpool_add(request: SignedInRequest) -> HttpResponse:
    form = KVPoolEntryForm(request.POST)
    if form.is_valid():
        row = form.save(commit=False)
        row.created_by = request.user
        row.save()
        messages.success(request, f"Ledger row added for {row.engine.name}.")
        return redirect("changelog:ledgers")
    messages.error(request, "Nothing was saved: fix the ledger row's fields.")
    return render(request, "changelog/ledgers.html", _ledger_context(kv_form=form), status=400)


@role_required("operator")
@require_http_methods(["GET", "POST"])
def incident_close(request: SignedInRequest, pk: int) -> HttpResponse:
    incident = get_object_or_404(Incident, pk=pk)
    initial = {
        "closed_at": timezone.localtime().replace(second=0, microsecond=0),
        "fix_that_held": incident.fix_that_held,
    }
    form = IncidentCloseForm(request.POST or None, incident=incident, initial=initial)
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        with transaction.atomic():
            incident.closed_at, incident.fix_that_held, incident.closed_by = (
                d["closed_at"],
                d["fix_that_held"],
                request.user,
            )
            incident.save(update_fields=["closed_at", "fix_that_held", "closed_by"])
            for entry in d["entries"]:
                entry_link_incidents(entry=entry, incidents=[incident])
        messages.success(request, "Incident closed with the fix that held.")
        return redirect("changelog:ledgers")
    if request.method == "POST":
        messages.error(request, "Nothing was saved: fix the fields marked below.")
    return render(request, "changelog/incident_close.html", {"incident": incident, "form": form})


@require_GET
def ledger_export(request: HttpRequest, ledger: str, fmt: str) -> HttpResponse:  # noqa: ARG001 (a view's signature)
    try:
        text, content_type = export_ledger(ledger=ledger, fmt=fmt)
    except KeyError:
        raise Http404("Export kvpool or incidents as .md or .csv") from None
    return HttpResponse(
        text,
        content_type=content_type,
        headers={"Content-Disposition": f'attachment; filename="{ledger}-ledger.{fmt}"'},
    )
