"""The part of a profile form every measured kind shares: sampling parameters as JSON text, the cron
and whether it is enabled, and the engines offered."""

import json
from typing import Any

from django import forms

from dashboard.forms import ids
from dashboard.forms.bounds import bound_widgets
from dashboard.models import Engine

from .services import parse_cron


class MeasuredProfileForm(forms.ModelForm):
    """A kind's form subclasses this with its Meta (a subclass of this Meta, with its model and fields)
    and, for its help texts, an example of each: SAMPLING_EXAMPLE (a JSON object) and CRON_EXAMPLE
    (five cron fields)."""

    class Meta:
        formfield_callback = ids.formfield  # its foreign keys' ids are checked before any query

    SAMPLING_EXAMPLE = '{"temperature": 0.6}'
    CRON_EXAMPLE = "0 3 * * *"

    sampling_params = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    cron = forms.CharField(required=False, max_length=120, label="Schedule (cron, UTC)")
    schedule_enabled = forms.BooleanField(required=False, initial=True, label="Schedule enabled")

    def __init__(self, *args: Any, cron: str = "", schedule_enabled: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields[
            "sampling_params"
        ].help_text = f"Explicit sampling only, a JSON object, e.g. {self.SAMPLING_EXAMPLE}"
        self.fields[
            "cron"
        ].help_text = f"minute hour day-of-month month day-of-week, e.g. '{self.CRON_EXAMPLE}'; empty = manual only"
        bound_widgets(self)
        # A retired engine is not offered: nothing runs on it.
        engine_field = self.fields["engine"]
        assert isinstance(engine_field, forms.ModelChoiceField)
        engine_field.queryset = Engine.objects.filter(retired_at__isnull=True).order_by("name")
        self.fields["cron"].initial = cron
        self.fields["schedule_enabled"].initial = schedule_enabled
        if self.instance.pk and self.instance.sampling_params:
            self.initial["sampling_params"] = json.dumps(self.instance.sampling_params)

    def clean_sampling_params(self) -> dict[str, Any]:
        text = (self.cleaned_data.get("sampling_params") or "").strip()
        if not text:
            return {}
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"Not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise forms.ValidationError('Give a JSON object, e.g. {"temperature": 0.6}.')
        return value

    def clean_cron(self) -> str:
        text = (self.cleaned_data.get("cron") or "").strip()
        if text:
            try:
                parse_cron(text)
            except ValueError as exc:
                raise forms.ValidationError(str(exc)) from None
        return text
