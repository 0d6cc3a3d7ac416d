import json

from django import forms

from dashboard.benchmarks.forms import SamplingCronMixin
from dashboard.forms import ids
from dashboard.forms.bounds import bound_widgets
from dashboard.models import Engine

from .models import ProbeProfile


class ProbeProfileForm(SamplingCronMixin, forms.ModelForm):
    sampling_params = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text='Explicit sampling only, a JSON object, e.g. {"temperature": 0.6}',
    )
    cron = forms.CharField(
        required=False,
        max_length=120,
        label="Schedule (cron, UTC)",
        help_text="minute hour day-of-month month day-of-week, e.g. '0 4 * * *'; empty = manual only",
    )
    schedule_enabled = forms.BooleanField(required=False, initial=True, label="Schedule enabled")

    class Meta:
        model = ProbeProfile
        formfield_callback = ids.formfield  # its foreign keys' ids are checked before any query
        fields = [
            "name",
            "engine",
            "kind",
            "tokens",
            "depths",
            "decoys",
            "corpus",
            "control",
            "control_corpus",
            "sampling",
            "sampling_params",
            "thinking",
            "reps",
            "timeout_s",
        ]

    def __init__(self, *args, cron="", schedule_enabled=True, **kwargs):
        super().__init__(*args, **kwargs)
        bound_widgets(self)
        # A retired engine is not offered: nothing runs on it.
        self.fields["engine"].queryset = Engine.objects.filter(retired_at__isnull=True).order_by("name")
        self.fields["cron"].initial = cron
        self.fields["schedule_enabled"].initial = schedule_enabled
        if self.instance.pk and self.instance.sampling_params:
            self.initial["sampling_params"] = json.dumps(self.instance.sampling_params)
