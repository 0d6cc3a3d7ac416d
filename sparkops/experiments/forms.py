from django import forms

from dashboard.forms.ids import IdChoiceField
from dashboard.models import Engine
from sparkops.benchmarks.models import MAX_DEPTH, MAX_OUTPUT

from .models import MAX_REPS, MIN_REPS, PROBE_KINDS


class ExperimentForm(forms.Form):
    name = forms.CharField(max_length=120, help_text="What it decides, e.g. 'MTP on codegen'")
    engine_a = IdChoiceField(Engine.objects.filter(retired_at__isnull=True), label="Arm A (control)")
    engine_b = IdChoiceField(
        Engine.objects.filter(retired_at__isnull=True),
        label="Arm B (variant)",
        help_text="The same engine as A: one engine, restarted by you between repetitions when the page asks",
    )
    flags = forms.CharField(
        required=False,
        max_length=500,
        help_text="The launch flags the arms should differ by, comma-separated (e.g. --speculative-config)",
    )
    reps = forms.IntegerField(min_value=MIN_REPS, max_value=MAX_REPS, initial=MIN_REPS, label="Repetitions per arm")
    depth = forms.IntegerField(min_value=0, max_value=MAX_DEPTH, initial=1024, help_text="Prompt tokens")
    output_tokens = forms.IntegerField(min_value=2, max_value=MAX_OUTPUT, initial=512, help_text="Pinned")
    mode = forms.ChoiceField(choices=[("cold", "cold (nothing cached)"), ("follow_up", "follow-up (warm prefix)")])
    probe = forms.ChoiceField(
        required=False,
        choices=[("", "none (a pass count of the runs' checks)")] + [(k, k) for k in PROBE_KINDS],
        label="Quality probe",
        help_text="Run on each arm after its last repetition, so a faster arm that answers worse shows",
    )

    def flag_list(self) -> list[str]:
        return [f.strip() for f in self.cleaned_data["flags"].split(",") if f.strip()]
