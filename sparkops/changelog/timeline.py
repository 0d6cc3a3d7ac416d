"""The timeline's filter form: GET parameters in, selector keyword arguments out."""

from datetime import date, datetime, time, timedelta
from typing import Any

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator
from django.utils import timezone

from dashboard.forms.ids import IdChoiceField
from dashboard.models import Engine

from .models import Entry

# The days a filter may name: a day the site's time zone can hold, with the day after (the range's
# exclusive end) too; 9999-12-31 + 1 day would be an OverflowError, a 500.
SEARCHABLE_DAYS = [
    MinValueValidator(date(1900, 1, 1), "Pick a day from 1900-01-01 on."),
    MaxValueValidator(date(9998, 12, 31), "Pick a day up to 9998-12-31."),
]


class TimelineFilter(forms.Form):
    engine = IdChoiceField(
        queryset=Engine.objects.all(), to_field_name="name", required=False, empty_label="all engines"
    )
    kind = forms.ChoiceField(choices=[("", "all kinds"), *Entry.Kind.choices], required=False)
    start = forms.DateField(
        required=False, widget=forms.DateInput(attrs={"type": "date"}), label="From", validators=SEARCHABLE_DAYS
    )
    end = forms.DateField(
        required=False, widget=forms.DateInput(attrs={"type": "date"}), label="To", validators=SEARCHABLE_DAYS
    )
    corrected = forms.ChoiceField(
        choices=[("", "with or without corrections"), ("yes", "has corrections"), ("no", "no corrections")],
        required=False,
    )
    q = forms.CharField(required=False, label="Search", widget=forms.TextInput(attrs={"placeholder": "text search"}))

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if data.get("start") and data.get("end") and data["end"] < data["start"]:
            raise forms.ValidationError("The range ends before it starts.")
        return data

    def criteria(self) -> dict[str, Any]:
        if not self.is_bound or not self.is_valid():
            return {}
        d = self.cleaned_data
        day = lambda value: timezone.make_aware(datetime.combine(value, time.min))  # noqa: E731
        return {
            "engine": d.get("engine"),
            "kind": d.get("kind") or None,
            "start": day(d["start"]) if d.get("start") else None,
            "end": day(d["end"]) + timedelta(days=1) if d.get("end") else None,
            "has_corrections": {"yes": True, "no": False}.get(d.get("corrected", "")),
            "text": d.get("q", "").strip() or None,
        }


class ClaimFilter(forms.Form):
    engine = IdChoiceField(
        queryset=Engine.objects.all(), to_field_name="name", required=False, empty_label="all engines"
    )
    state = forms.ChoiceField(
        required=False,
        initial="",
        choices=[
            ("", "every state"),
            ("believed", "believed now (standing or corrected)"),
            ("standing", "standing"),
            ("corrected", "corrected"),
            ("withdrawn", "withdrawn"),
            ("superseded", "superseded"),
        ],
    )

    def criteria(self) -> dict[str, Any]:
        if not self.is_bound or not self.is_valid():
            return {}
        return {"engine": self.cleaned_data.get("engine"), "state": self.cleaned_data.get("state") or None}


class ImportForm(forms.Form):
    """Step one uploads (or pastes) and previews; step two imports what was previewed."""

    MAX_BYTES = 5 * 1024 * 1024

    file = forms.FileField(
        required=False, help_text="A Markdown change log (its format: the manual, /docs/changelog/#markdown-format)."
    )
    text = forms.CharField(required=False, strip=False, widget=forms.Textarea(attrs={"rows": 8}), label="or paste it")
    previewed = forms.CharField(required=False, widget=forms.HiddenInput)

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        upload = data.get("file")  # False when the form's "clear" box came ticked
        if upload:
            if upload.size > self.MAX_BYTES:
                raise forms.ValidationError(f"The file is over {self.MAX_BYTES // 1024 // 1024} MB.")
            try:
                data["text"] = upload.read().decode("utf-8")
            except UnicodeDecodeError:
                raise forms.ValidationError("The file is not UTF-8 text.") from None
        # Browsers send a textarea with CRLF: one spelling of line ends, so the preview's digest holds.
        data["text"] = (data.get("text") or "").replace("\r\n", "\n").replace("\r", "\n")
        if not data["text"].strip():
            raise forms.ValidationError("Choose a file or paste a log.")
        return data
