from typing import cast

from django import forms

from dashboard.forms import ids
from sparkops.measured.forms import MeasuredProfileForm

from .models import PairRun, Profile


class ProfileForm(MeasuredProfileForm):
    SAMPLING_EXAMPLE = '{"temperature": 0.6, "top_p": 0.95}'
    CRON_EXAMPLE = "0 3 * * *"

    class Meta(MeasuredProfileForm.Meta):
        model = Profile
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

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk and not self.instance.sampling_params:
            self.initial["sampling_params"] = ""  # not "{}"

    def clean(self):
        super().clean()
        data = self.cleaned_data  # what super().clean() returns; the stubs allow None
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
            # ids.formfield (Meta.formfield_callback) made each foreign key's field an IdChoiceField.
            cast(ids.IdChoiceField, self.fields[name]).queryset = live

    def clean(self):
        super().clean()
        data = self.cleaned_data  # what super().clean() returns; the stubs allow None
        a, b = data.get("profile_a"), data.get("profile_b")
        if a and b and a.engine_id == b.engine_id:
            raise forms.ValidationError("Pick profiles on two different engines.")
        return data
