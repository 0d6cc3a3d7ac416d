from sparkops.measured.forms import MeasuredProfileForm

from .models import ProbeProfile


class ProbeProfileForm(MeasuredProfileForm):
    SAMPLING_EXAMPLE = '{"temperature": 0.6}'
    CRON_EXAMPLE = "0 4 * * *"

    class Meta(MeasuredProfileForm.Meta):
        model = ProbeProfile
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
