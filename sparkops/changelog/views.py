"""Change-log pages: timeline, entry (claims with corrections beside them), new entry, edit
within the grace period, new correction, export. Viewers read; every write is operator-only."""

import hashlib
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.db import DatabaseError
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods

from dashboard.dbfail import unavailable
from dashboard.models import Engine
from dashboard.roles import SignedInRequest, role_required

from .export import export_json, export_markdown
from .forms import ClaimFormSet, CorrectionForm, EntryForm, claims_from
from .importer import import_log, plan_import
from .models import AppendOnlyError, Claim, DuplicateError, Entry
from .parse import LogSyntaxError
from .selectors import claim_measurement, claims_overview, entry_timeline, measure_claims
from .services import correction_create, entry_create, entry_edit
from .timeline import ClaimFilter, ImportForm, TimelineFilter


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    filters = TimelineFilter(request.GET or None)
    entries = entry_timeline(**filters.criteria()) if filters.is_valid() or not request.GET else Entry.objects.none()
    page = Paginator(entries, 50).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "changelog/index.html",
        {"filters": filters, "page": page, "query": query.urlencode(), "kinds": Entry.Kind.choices},
    )


def _entry_context(entry: Entry) -> dict[str, Any]:
    claims = []
    for claim in entry.claims.select_related("engine").prefetch_related("corrections__evidence"):
        claims.append(
            {"claim": claim, "corrections": list(claim.corrections.all()), "comparison": claim_measurement(claim=claim)}
        )
    return {
        "entry": entry,
        "claims": claims,
        "entry_corrections": entry.corrections.filter(claim__isnull=True).prefetch_related("evidence"),
        "flags": entry.flags.all(),
        "evidence": entry.evidence.all(),
        "revisions": entry.revisions.all(),
        "incidents": entry.incidents.all(),
        "engines": entry.engines.all(),
    }


@require_GET
def entry_detail(request: HttpRequest, pk: int) -> HttpResponse:
    entry = get_object_or_404(Entry, pk=pk)
    initial = {"target": request.GET.get("claim", "entry")}
    form = CorrectionForm(entry=entry, initial=initial)
    return render(request, "changelog/entry.html", {**_entry_context(entry), "correction_form": form})


@role_required("operator")
@require_http_methods(["GET", "POST"])
def entry_new(request: SignedInRequest) -> HttpResponse:
    form = EntryForm(request.POST or None, initial={"effective_at": _now_minute()})
    claims = ClaimFormSet(request.POST or None, prefix="claims")
    duplicate, status = None, 200
    if request.method == "POST" and form.is_valid() and claims.is_valid():
        d = form.cleaned_data
        try:
            entry = entry_create(
                author=request.user,
                effective_at=d["effective_at"],
                title=d["title"],
                kind=d["kind"],
                engines=d["engines"],
                units=d["units"],
                body_md=d["body_md"],
                reason=d["reason"],
                expected_effect=d["expected_effect"],
                flags=d["flags"],
                claims=claims_from(claims),
                evidence=d["evidence"],
            )
        except DuplicateError as exc:
            duplicate = str(exc)
        except DatabaseError as exc:
            status = _refused_write(form, exc)
        else:
            messages.success(request, f"Logged “{entry.title}”.")
            return redirect(entry)
    if request.method == "POST":
        messages.error(request, duplicate or "Nothing was saved: fix the fields marked below.")
    context = {"form": form, "claims": claims, "editing": None}
    return render(request, "changelog/entry_form.html", context, status=status)


def _refused_write(form: forms.BaseForm, exc: Exception) -> int:
    """A write the database refused for a reason of its own (full, read-only, gone)
    is an error on the form, which keeps what was typed; the answer is 503. Anything
    else is raised."""
    reason = unavailable(exc)
    if reason is None:
        raise exc
    form.add_error(None, f"Nothing was saved: {reason}. What you wrote is still in the form; try again later.")
    return 503


def _now_minute() -> datetime:
    return timezone.localtime().replace(second=0, microsecond=0)


def _edit_initial(entry: Entry) -> dict[str, Any]:
    return {
        "effective_at": timezone.localtime(entry.effective_at),
        "kind": entry.kind,
        "title": entry.title,
        "engines": list(entry.engines.all()),
        "units": entry.units,
        "body_md": entry.body_md,
        "reason": entry.reason,
        "expected_effect": entry.expected_effect,
        "flags": "\n".join(str(f) for f in entry.flags.all()),
    }


@role_required("operator")
@require_http_methods(["GET", "POST"])
def entry_edit_view(request: SignedInRequest, pk: int) -> HttpResponse:
    entry = get_object_or_404(Entry, pk=pk)
    if entry.is_locked:
        messages.error(request, f"Nothing can be edited: this entry is {entry.locked_why}.")
        return redirect(entry)
    form = EntryForm(request.POST or None, initial=_edit_initial(entry))
    form.fields.pop("evidence")
    claim_initial = [
        {"text": c.text, "metric": c.metric, "predicted": c.predicted, "window": c.window, "engine": c.engine}
        for c in entry.claims.all()
    ]
    claims = ClaimFormSet(request.POST or None, prefix="claims", initial=claim_initial)
    status = 200
    if request.method == "POST" and form.is_valid() and claims.is_valid():
        d = form.cleaned_data
        try:
            entry_edit(
                entry=entry,
                user=request.user,
                effective_at=d["effective_at"],
                title=d["title"],
                kind=d["kind"],
                engines=d["engines"],
                units=d["units"],
                body_md=d["body_md"],
                reason=d["reason"],
                expected_effect=d["expected_effect"],
                flags=d["flags"],
                claims=claims_from(claims),
            )
        except AppendOnlyError as exc:
            messages.error(request, f"Nothing was saved: {exc}")
            return redirect(entry)
        except DatabaseError as exc:
            status = _refused_write(form, exc)
        else:
            messages.success(request, "Edit saved; the previous text is kept in the edit history.")
            return redirect(entry)
    if request.method == "POST":
        messages.error(request, "Nothing was saved: fix the fields marked below.")
    context = {"form": form, "claims": claims, "editing": entry}
    return render(request, "changelog/entry_form.html", context, status=status)


@role_required("operator")
@require_http_methods(["POST"])
def correction_new(request: SignedInRequest, pk: int) -> HttpResponse:
    entry = get_object_or_404(Entry, pk=pk)
    form = CorrectionForm(request.POST, entry=entry)
    if form.is_valid():
        d = form.cleaned_data
        try:
            correction_create(
                entry=entry,
                author=request.user,
                text_md=d["text_md"],
                corrected_at=d["corrected_at"],
                claim=d["claim"],
                mark=d["mark"],
                evidence=d["evidence"],
            )
        except DuplicateError as exc:
            messages.error(request, str(exc))
            return redirect(entry)
        messages.success(request, "Correction added beside the original.")
        return redirect(entry)
    messages.error(request, "Nothing was saved: fix the correction's fields.")
    return render(request, "changelog/entry.html", {**_entry_context(entry), "correction_form": form}, status=400)


@require_GET
def export(request: HttpRequest) -> HttpResponse:
    fmt = request.GET.get("format", "md")
    if fmt == "json":
        return HttpResponse(
            export_json(),
            content_type="application/json; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="changelog.json"'},
        )
    return HttpResponse(
        export_markdown(),
        content_type="text/markdown; charset=utf-8",
        headers={"Content-Disposition": 'attachment; filename="changelog.md"'},
    )


@require_GET
def claims(request: HttpRequest) -> HttpResponse:
    """What do we believe now? Every claim with its state, engine, prediction against
    measurement and evidence; filterable by engine and state."""
    filters = ClaimFilter(request.GET or None)
    rows = claims_overview(**filters.criteria(), measure=False) if filters.is_valid() or not request.GET else []
    page = Paginator(rows, 50).get_page(request.GET.get("page"))
    measure_claims(page.object_list)  # the ledger is read for the rows shown only
    query = request.GET.copy()
    query.pop("page", None)
    named = Engine.objects.filter(Q(changelog_entries__isnull=False) | Q(pk__in=_claim_engine_ids())).distinct()
    return render(
        request,
        "changelog/claims.html",
        {"filters": filters, "page": page, "query": query.urlencode(), "engines": named.order_by("name")},
    )


def _claim_engine_ids() -> QuerySet[Claim, Any]:  # engine_id values, for a subquery
    return Claim.objects.filter(engine__isnull=False).values("engine_id")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@role_required("operator")
@require_http_methods(["GET", "POST"])
def log_import(request: SignedInRequest) -> HttpResponse:
    """Step one shows the dry run (what would be created, the notes, or the refusal with its
    line); nothing is written until step two imports exactly the text that was previewed."""
    form = ImportForm(request.POST or None, request.FILES or None)
    context: dict[str, Any] = {"form": form, "plan": None, "error": None, "text": "", "digest": ""}
    if request.method == "POST" and form.is_valid():
        text = form.cleaned_data["text"]
        context.update(text=text, digest=_digest(text))
        if request.POST.get("action") == "import" and form.cleaned_data.get("previewed") == _digest(text):
            try:
                plan = import_log(text, author=request.user)
            except LogSyntaxError as exc:  # the log changed between preview and import
                context["error"] = f"{exc}; nothing imported"
            else:
                messages.success(request, f"Imported: {plan.summary()}.")
                return redirect("changelog:index")
        else:
            try:
                context["plan"] = plan_import(text)
            except LogSyntaxError as exc:
                context["error"] = f"{exc}; nothing imported"
    status = 400 if context["error"] else 200
    return render(request, "changelog/import.html", context, status=status)
