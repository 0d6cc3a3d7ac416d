from django import forms

from dashboard.models import Engine


class EngineForm(forms.ModelForm):
    host_name = forms.CharField(
        required=False, max_length=63, help_text="Host (box) whose worker reads its unit; default: this box"
    )

    class Meta:
        model = Engine
        fields = ["name", "kind", "url", "unit", "unit_scope", "expected_up", "poll_interval_s"]

    def clean_url(self) -> str:
        url = self.cleaned_data["url"]
        if not url.startswith(("http://", "https://")):
            raise forms.ValidationError("The URL must start with http:// or https://.")
        return url.rstrip("/")

    def clean_poll_interval_s(self) -> float | None:
        value = self.cleaned_data.get("poll_interval_s")
        if value is not None and value < 0.5:
            raise forms.ValidationError("A poll interval below 0.5 s would load the engine; use 0.5 or more.")
        return value
