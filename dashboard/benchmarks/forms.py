import json

from django import forms

from dashboard.forms import ids
from dashboard.forms.bounds import bound_widgets
from dashboard.measured.services import parse_cron
from dashboard.models import Engine

from .models import PairRun, Profile


class SamplingCronMixin:
    """The `sampling_params` (a JSON object as text) and `cron` fields' cleaning, for every form of
    a profile that sends requests on a schedule (benchmark and probe profiles)."""

    def clean_sampling_params(self):
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

    def clean_cron(self):
        text = (self.cleaned_data.get("cron") or "").strip()
        if text:
            try:
                parse_cron(text)
            except ValueError as exc:
                raise forms.ValidationError(str(exc)) from None
        return text


class ProfileForm(SamplingCronMixin, forms.ModelForm):
    sampling_params = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text='Explicit sampling only, a JSON object, e.g. {"temperature": 0.6, "top_p": 0.95}',
    )
    cron = forms.CharField(
        required=False,
        max_length=120,
        label="Schedule (cron, UTC)",
        help_text="minute hour day-of-month month day-of-week, e.g. '0 3 * * *'; empty = manual only",
    )
    schedule_enabled = forms.BooleanField(required=False, initial=True, label="Schedule enabled")

    class Meta:
        model = Profile
        formfield_callback = ids.formfield  # its foreign keys' ids are checked before any query
        fields = [
            "name",
            "engine",
            "workload",
            "instruction",
            "depth",
            "mode",
            "output_tokens",
            "sampling",
            "sampling_params",
            "thinking",
            "reps",
            "concurrency",
            "force",
            "timeout_s",
        ]
        widgets = {"instruction": forms.Textarea(attrs={"rows": 2})}

    def __init__(self, *args, cron="", schedule_enabled=True, **kwargs):
        super().__init__(*args, **kwargs)
        bound_widgets(self)
        # A retired engine is not offered: nothing runs on it.
        engine_field = self.fields["engine"]
        assert isinstance(engine_field, forms.ModelChoiceField)
        engine_field.queryset = Engine.objects.filter(retired_at__isnull=True).order_by("name")
        self.fields["cron"].initial = cron
        self.fields["schedule_enabled"].initial = schedule_enabled
        if self.instance.pk:
            self.initial["sampling_params"] = (
                json.dumps(self.instance.sampling_params) if self.instance.sampling_params else ""
            )

    def clean(self):
        data = super().clean()
        depth, conc = data.get("depth"), data.get("concurrency")
        if depth and conc and conc > 1 and not data.get("force"):
            self.add_error(
                "concurrency",
                "Depth > 0 with concurrency > 1 deadlocked an engine once: "
                "use depth 0 or concurrency 1, or tick force.",
            )
        return data


class PairForm(forms.ModelForm):
    class Meta:
        model = PairRun
        formfield_callback = ids.formfield  # its foreign keys' ids are checked before any query
        fields = ["profile_a", "profile_b"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A retired engine's profiles are not offered (nothing runs on it); a posted one is refused.
        live = Profile.objects.filter(engine__retired_at__isnull=True).select_related("engine").order_by("name")
        for name in ("profile_a", "profile_b"):
            self.fields[name].queryset = live

    def clean(self):
        data = super().clean()
        a, b = data.get("profile_a"), data.get("profile_b")
        if a and b and a.engine_id == b.engine_id:
            raise forms.ValidationError("Pick profiles on two different engines.")
        return data
