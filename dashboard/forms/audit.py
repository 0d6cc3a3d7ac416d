"""The launch audit's thresholds for one box, edited by an admin on its audit page."""

from typing import Any

from django import forms
from django.forms import BoundField

from sparkops.audit.checks import CHECKS
from sparkops.audit.thresholds import STRING_MAX, threshold_value, thresholds


def field_name(key: str, threshold: str) -> str:
    return f"{key}__{threshold}"


class ThresholdsForm(forms.Form):
    """One field per threshold of every check, typed and bounded as the check takes it; the
    initial values are those in force (the box's stored ones, else the defaults)."""

    def __init__(
        self, *args: Any, in_force: dict[str, dict[str, Any]], stored: dict[str, dict[str, Any]], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.rows: list[dict[str, Any]] = []
        for key, threshold, default, bounds in thresholds():
            name = field_name(key, threshold)
            help_text = f"default {default:g}" if not isinstance(default, str) else f"default {default}"
            if bounds:
                help_text += f"; {bounds.text()}"
            common: dict[str, Any] = {"label": threshold.replace("_", " "), "help_text": help_text, "required": True}
            field: forms.Field
            limits = bounds.field_kwargs() if bounds else {}  # every number has its Bounds
            if isinstance(default, int):
                field = forms.IntegerField(**limits, **common)
            elif isinstance(default, float):
                field = forms.FloatField(**limits, **common)
                field.widget.attrs["step"] = "any"
            else:
                field = forms.CharField(max_length=STRING_MAX, **common)
            field.initial = in_force[key][threshold]
            self.fields[name] = field
            self.rows.append(
                {
                    "check": key,
                    "title": CHECKS[key].title,
                    "threshold": threshold,
                    "stored": threshold in stored.get(key, {}),
                }
            )

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        self.values: dict[tuple[str, str], Any] = {}
        for key, threshold, _, _ in thresholds():
            name = field_name(key, threshold)
            if name not in data:
                continue  # its own field's error is shown there
            try:
                self.values[(key, threshold)] = threshold_value(key, threshold, data[name])
            except ValueError as exc:
                self.add_error(name, str(exc))
        return data

    def bound_rows(self) -> list[tuple[dict[str, Any], BoundField]]:
        """(row, bound field) pairs for the template, grouped by check in order."""
        return [(row, self[field_name(row["check"], row["threshold"])]) for row in self.rows]
