"""The range an editable number may take, declared once and read by everything that takes it.

An alert rule's setting, a launch-audit threshold and a benchmark profile's field are each typed
in by an operator in a form, on the command line or through an import. Each is declared with one
`Bounds`, and the check of a value, the form field's min/max (the browser refuses first) and the
model field's validators come from it, so the paths into the same number cannot disagree. The
message stays each caller's: it names the setting the way its own page or command does."""

from typing import NamedTuple

from django.core.validators import MaxValueValidator, MinValueValidator


class Bounds(NamedTuple):
    """(lowest, highest), both included; None: unbounded on that side. A tuple, so `low, high =
    bounds` and JSON's `[low, high]` read it as before."""

    low: float | None
    high: float | None

    def holds(self, value: float) -> bool:
        """Whether VALUE is within; NaN never is (it compares with nothing)."""
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    def field_kwargs(self) -> dict:
        """min_value/max_value of a Django form number field."""
        return {"min_value": self.low, "max_value": self.high}

    def validators(self) -> list:
        """The model field validators that refuse what is outside (none on an unbounded side)."""
        return ([MinValueValidator(self.low)] if self.low is not None else []) + (
            [MaxValueValidator(self.high)] if self.high is not None else []
        )

    def text(self) -> str:
        """ "1–256": the range as a help text shows it."""
        return f"{self.low:g}–{self.high:g}"
