"""Forms for entries, corrections and the ledgers. They validate everything and build the
arguments the services take, so a view never saves half an entry."""

from datetime import UTC, datetime, timedelta
from typing import Any, cast

from django import forms
from django.utils import timezone

from dashboard.forms import ids
from dashboard.forms.ids import IdChoiceField, IdMultipleChoiceField
from dashboard.models import Engine, Incident, KVPoolEntry
from dashboard.models.ledgers import GIB

from .grammar import EvidenceLine, FlagLine, fenced_lines, parse_evidence_lines, parse_flags
from .models import Claim, Correction, Entry

DATETIME_WIDGET = forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M")
DT_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%d"]
FLAG_HELP = "One per line: --max-model-len: 131072 → 262144 ('->' works too)."
MAX_WINDOW = 2**31 - 1  # Claim.window is a PositiveIntegerField: its range on every database
MAX_KV_GIB = 1024**2  # a PiB of KV cache is beyond any box; KVPoolEntry.kv_memory_bytes is a bigint
EVIDENCE_HELP = "One per line: a URL, run:ID, alert:ID or chart:2026-08-20T09:00/2026-08-20T10:00."


def _reserved_lines(text: str) -> str | None:
    """Lines the Markdown log reads as structure; refused so export → import keeps the entry
    intact. Inside a fenced code block (``` or ~~~) they are only text."""
    fenced, unclosed = fenced_lines(text.splitlines())
    if unclosed:
        return f"line {unclosed} opens a code fence that is never closed; close it with the same fence."
    for n, line in enumerate(text.splitlines(), 1):
        if n in fenced:
            continue
        if line.startswith("## "):
            return f"line {n} starts with '## ', which begins a new entry in the Markdown log; use '### '."
        if line.lstrip("> ").startswith("Correction ") and line.startswith(">"):
            return f"line {n} looks like a correction; write corrections with the correction form."
    return None


EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)  # before any of this hardware; a typo, not a date
FUTURE_SLACK = timedelta(days=7)  # a change planned for next week may be written down now


def sane_date(at: datetime, *, what: str) -> datetime:
    """AT, or a clear error when it lies before 2000 or more than a week ahead."""
    if at < EARLIEST:
        raise forms.ValidationError(f"{what} dated {at:%Y-%m-%d} is before 2000: check the year.")
    if at > timezone.now() + FUTURE_SLACK:
        raise forms.ValidationError(f"{what} dated {at:%Y-%m-%d} is more than a week ahead: check the date.")
    return at


class EntryForm(forms.Form):
    effective_at = forms.DateTimeField(
        widget=DATETIME_WIDGET, input_formats=DT_FORMATS, help_text="When it took effect; may be in the past."
    )
    kind = forms.ChoiceField(choices=Entry.Kind.choices)
    title = forms.CharField(max_length=200)
    engines = IdMultipleChoiceField(queryset=Engine.objects.all(), required=False, widget=forms.CheckboxSelectMultiple)
    units = forms.CharField(required=False, help_text="systemd units, comma-separated")
    flags = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}), help_text=FLAG_HELP)
    body_md = forms.CharField(label="Body (Markdown)", required=False, widget=forms.Textarea(attrs={"rows": 8}))
    reason = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    expected_effect = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    evidence = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}), help_text=EVIDENCE_HELP)

    def clean_title(self) -> str:
        title = self.cleaned_data["title"].strip()
        if "\n" in title or not title:
            raise forms.ValidationError("A title is one non-empty line.")
        return title

    def clean_effective_at(self) -> datetime:
        return sane_date(self.cleaned_data["effective_at"], what="A change")

    def clean_flags(self) -> list[FlagLine]:
        try:
            return parse_flags(self.cleaned_data["flags"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_evidence(self) -> list[EvidenceLine]:
        try:
            return parse_evidence_lines(self.cleaned_data["evidence"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_body_md(self) -> str:
        body = self.cleaned_data["body_md"]
        problem = _reserved_lines(body)
        if problem:
            raise forms.ValidationError(problem)
        return body

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if data.get("kind") == Entry.Kind.FLAG_CHANGE and not data.get("flags") and "flags" not in self.errors:
            self.add_error("flags", "A flag-change entry names at least one flag change.")
        return data


class ClaimForm(forms.Form):
    text = forms.CharField(label="Claim", required=False, widget=forms.Textarea(attrs={"rows": 2}))
    metric = forms.ChoiceField(choices=[("", "no prediction"), *Claim.Metric.choices], required=False)
    predicted = forms.FloatField(required=False, label="Predicted value")
    window = forms.IntegerField(required=False, min_value=1, max_value=MAX_WINDOW, label="At window")
    engine = IdChoiceField(queryset=Engine.objects.all(), required=False)

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        has_number = data.get("metric") or data.get("predicted") is not None
        if has_number and not (data.get("text") or "").strip():
            raise forms.ValidationError("A prediction belongs to a claim: write the claim's text.")
        if bool(data.get("metric")) != (data.get("predicted") is not None) and not self.errors:
            raise forms.ValidationError("A prediction needs both a metric and a predicted value.")
        return data

    def claim_fields(self) -> dict[str, Any]:
        d = self.cleaned_data
        return {
            "text": d["text"].strip(),
            "metric": d.get("metric") or "",
            "predicted": d.get("predicted"),
            "window": d.get("window"),
            "engine": d.get("engine"),
        }


# A form count past MAX_CLAIMS is refused with 20 rows shown, not read as Django's default would
# (absolute_max = max_num + 1000): a request that says it has 2**31 claims built and rendered
# 1,020 forms (4-5 s of a core each time, from one POST).
MAX_CLAIMS = 20
ClaimFormSet = forms.formset_factory(ClaimForm, extra=2, max_num=MAX_CLAIMS, absolute_max=MAX_CLAIMS)


def claims_from(formset: forms.BaseFormSet) -> list[dict[str, Any]]:
    return [f.claim_fields() for f in formset.forms if (f.cleaned_data.get("text") or "").strip()]


class CorrectionForm(forms.Form):
    corrected_at = forms.DateTimeField(
        widget=DATETIME_WIDGET, input_formats=DT_FORMATS, initial=timezone.now, label="Date of the correction"
    )
    target = forms.ChoiceField(label="Corrects")
    mark = forms.ChoiceField(choices=Correction.Mark.choices, required=False, label="Mark the claim")
    text_md = forms.CharField(label="Correction (Markdown)", widget=forms.Textarea(attrs={"rows": 5}))
    evidence = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}), help_text=EVIDENCE_HELP)

    def __init__(self, *args: Any, entry: Entry, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entry = entry
        self.claims = {str(c.pk): c for c in entry.claims.all()}
        cast(forms.ChoiceField, self.fields["target"]).choices = [("entry", "the whole entry")] + [
            (pk, f"claim {c.position + 1}: {c.text[:70]}") for pk, c in self.claims.items()
        ]

    def clean_evidence(self) -> list[EvidenceLine]:
        try:
            return parse_evidence_lines(self.cleaned_data["evidence"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_corrected_at(self) -> datetime:
        at = sane_date(self.cleaned_data["corrected_at"], what="A correction")
        if at < self.entry.effective_at:
            raise forms.ValidationError(
                "A correction cannot be older than the entry it corrects "
                f"({timezone.localtime(self.entry.effective_at):%Y-%m-%d %H:%M})."
            )
        return at

    def clean_text_md(self) -> str:
        text = self.cleaned_data["text_md"].strip()
        if not text:
            raise forms.ValidationError("Say what was wrong and what is right.")
        problem = _reserved_lines(text)
        if problem:
            raise forms.ValidationError(problem)
        return text

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        data["claim"] = self.claims.get(data.get("target", ""))
        if data.get("mark") and data["claim"] is None and "target" not in self.errors:
            self.add_error("mark", "Withdrawn or superseded applies to one claim; pick the claim it corrects.")
        return data


class KVPoolEntryForm(forms.ModelForm):
    kv_memory_gib = forms.FloatField(required=False, min_value=0, max_value=MAX_KV_GIB, label="KV memory (GiB)")

    class Meta:
        model = KVPoolEntry
        formfield_callback = ids.formfield  # its foreign keys' ids are checked before any query
        fields = ["recorded_at", "engine", "memory_share", "pool_tokens", "window", "concurrency", "note"]
        widgets = {"recorded_at": DATETIME_WIDGET, "note": forms.TextInput()}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.DateTimeField, self.fields["recorded_at"]).input_formats = DT_FORMATS
        self.fields["concurrency"].help_text = "Leave empty to compute pool ÷ window."

    def clean_memory_share(self) -> float | None:
        share = self.cleaned_data.get("memory_share")
        if share is not None and not 0 < share <= 1:
            raise forms.ValidationError("--gpu-memory-utilization is a fraction between 0 and 1, e.g. 0.45.")
        return share

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        for name in ("pool_tokens", "window"):
            if data.get(name) is not None and data[name] <= 0:
                self.add_error(name, "Must be a positive number.")
        if data.get("concurrency") is None and data.get("pool_tokens") and data.get("window"):
            data["concurrency"] = round(data["pool_tokens"] / data["window"], 2)
        return data

    def save(self, commit=True):
        row = super().save(commit=False)
        gib = self.cleaned_data.get("kv_memory_gib")
        row.kv_memory_bytes = round(gib * GIB) if gib is not None else None
        row.concurrency = self.cleaned_data.get("concurrency")
        row.source = KVPoolEntry.Source.MANUAL
        if commit:
            row.save()
        return row


class IncidentCloseForm(forms.Form):
    closed_at = forms.DateTimeField(widget=DATETIME_WIDGET, input_formats=DT_FORMATS, initial=timezone.now)
    fix_that_held = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}))
    entries = IdMultipleChoiceField(
        queryset=Entry.objects.none(), required=False, label="Change-log entries that fixed it"
    )

    def __init__(self, *args: Any, incident: Incident, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.incident = incident
        cast(IdMultipleChoiceField, self.fields["entries"]).queryset = Entry.objects.filter(
            effective_at__gte=incident.opened_at - timedelta(days=1)
        ).order_by("effective_at")

    def clean_fix_that_held(self) -> str:
        text = self.cleaned_data["fix_that_held"].strip()
        if not text:
            raise forms.ValidationError("Write the fix that held.")
        return text

    def clean_closed_at(self) -> datetime:
        closed = self.cleaned_data["closed_at"]
        if closed < self.incident.opened_at:
            raise forms.ValidationError("An incident cannot close before it opened.")
        return closed
