"""A bound form's errors as the one line a service raises in its ValidationError, so that the
CLI and the API print the same words a page shows beside its fields. Any service that validates
its input through a form imports it from here (engines, alert channels), below all of them."""

from django.forms import BaseForm


def form_errors_text(form: BaseForm) -> str:
    """FORM's errors on one line: "field: message; …" ("error" for the non-field ones)."""
    return "; ".join(f"{'error' if f == '__all__' else f}: {e}" for f, errs in form.errors.items() for e in errs)
