"""The timeline's filter form: GET parameters in, selector keyword arguments out."""
from datetime import datetime, time, timedelta

from django import forms
from django.utils import timezone

from dashboard.models import Engine

from .models import Entry


class TimelineFilter(forms.Form):
    engine = forms.ModelChoiceField(queryset=Engine.objects.all(), to_field_name="name", required=False,
                                    empty_label="all engines")
    kind = forms.ChoiceField(choices=[("", "all kinds"), *Entry.Kind.choices], required=False)
    start = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}), label="From")
    end = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}), label="To")
    corrected = forms.ChoiceField(choices=[("", "with or without corrections"), ("yes", "has corrections"),
                                           ("no", "no corrections")], required=False)
    q = forms.CharField(required=False, label="Search", widget=forms.TextInput(attrs={"placeholder": "text search"}))

    def clean(self):
        data = super().clean()
        if data.get("start") and data.get("end") and data["end"] < data["start"]:
            raise forms.ValidationError("The range ends before it starts.")
        return data

    def criteria(self):
        if not self.is_bound or not self.is_valid():
            return {}
        d = self.cleaned_data
        day = lambda value: timezone.make_aware(datetime.combine(value, time.min))  # noqa: E731
        return {"engine": d.get("engine"), "kind": d.get("kind") or None,
                "start": day(d["start"]) if d.get("start") else None,
                "end": day(d["end"]) + timedelta(days=1) if d.get("end") else None,
                "has_corrections": {"yes": True, "no": False}.get(d.get("corrected")),
                "text": d.get("q", "").strip() or None}
