"""The browser refuses out-of-range input at the field too: a ModelForm's number inputs get the
min/max of their model field's validators and its text inputs the maxlength (the server still
checks every one: the validators run in the form's full_clean)."""

from typing import TypeVar

from django.core.exceptions import FieldDoesNotExist
from django.core.validators import MaxLengthValidator, MaxValueValidator, MinValueValidator
from django.forms import ModelForm, Textarea

TEXT_INPUTS = ("text", "email", "url", "search")
F = TypeVar("F", bound=ModelForm)


def model_bounds(model, name):
    """(min, max, max_length) of MODEL's field NAME from its validators; None where unbounded."""
    try:
        field = model._meta.get_field(name)
    except FieldDoesNotExist:
        return None, None, None
    lows = [v.limit_value for v in field.validators if isinstance(v, MinValueValidator)]
    highs = [v.limit_value for v in field.validators if isinstance(v, MaxValueValidator)]
    lengths = [v.limit_value for v in field.validators if isinstance(v, MaxLengthValidator)]
    if getattr(field, "max_length", None):
        lengths.append(field.max_length)
    return (max(lows) if lows else None, min(highs) if highs else None, min(lengths) if lengths else None)


def bound_widgets(form: F) -> F:
    model = form._meta.model
    for name, field in form.fields.items():
        low, high, length = model_bounds(model, name)
        if low is not None:
            field.widget.attrs["min"] = low
        if high is not None:
            field.widget.attrs["max"] = high
        texty = isinstance(field.widget, Textarea) or getattr(field.widget, "input_type", "") in TEXT_INPUTS
        if length is not None and texty:
            field.widget.attrs.setdefault("maxlength", length)
    return form
