"""Ids from the request that no row can have are refused before they reach the database.

"99999999999999999999999" is a fine Python int, but SQLite stops at 2**63 - 1 with an
OverflowError (a 500) and PostgreSQL's int columns stop earlier. Django refuses such a number
in an `exact` lookup by itself, not in the `__in` a multiple-choice field queries with, nor in a
related lookup. So every id the project takes from a form or a URL is checked against its
column's range here, once:

- IdChoiceField / IdMultipleChoiceField: the project's ModelChoiceField and
  ModelMultipleChoiceField. A number outside the key column's range is "not one of the
  available choices", the form error any absent row gets.
- formfield: the ModelForms' `Meta.formfield_callback`, so the fields a ModelForm makes
  from foreign keys and many-to-many fields are those two as well.
- Both read their choices in one query (ChoiceIterator), not through a server-side cursor.
- the `<id:pk>` path converter does the same for URLs (dashboard/converters.py).

tests/test_ids.py checks that no form or URL pattern of the project uses Django's plain ones."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.db import connections, models


def key_range(queryset, to_field_name=None):
    """(least, greatest) value the key column of QUERYSET's model holds on its database, or None
    when the key is not an integer."""
    field = queryset.model._meta.get_field(to_field_name) if to_field_name else queryset.model._meta.pk
    while field.is_relation:  # a one-to-one key: the range of the column it points at
        field = field.target_field
    if not isinstance(field, models.IntegerField):  # AutoField and BigAutoField are IntegerFields
        return None
    return connections[queryset.db].ops.integer_field_range(field.get_internal_type())


def fits(value: object, bounds: tuple[int | None, int | None] | None) -> bool:
    """False only for a whole number outside BOUNDS; anything else is for the field to judge."""
    if bounds is None or isinstance(value, models.Model):
        return True
    try:
        number = int(str(value).strip())
    except ValueError:
        return True  # not a number: the field's own lookup says it is no valid choice
    least, greatest = bounds
    return (least is None or number >= least) and (greatest is None or number <= greatest)


class ChoiceIterator(forms.models.ModelChoiceIterator):
    """A choice field's choices, read in one query. Django's iterator reads them with
    `QuerySet.iterator()`, which on PostgreSQL is a server-side cursor: DECLARE, FETCH and CLOSE,
    three round trips for a list of a few engines, for each field each time a form is drawn (three
    fields on the change log's entry form). A form's choices are a short list, and each rendering
    still reads them afresh (`all()` is a new query, never a cached result)."""

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        if self.field.empty_label is not None:
            yield ("", self.field.empty_label)
        for obj in self.queryset.all():
            yield self.choice(obj)


class IdChoiceField(forms.ModelChoiceField):
    """A ModelChoiceField that refuses, as an invalid choice, a number the key column cannot hold."""

    iterator = ChoiceIterator

    def to_python(self, value: Any) -> models.Model | None:
        if value not in self.empty_values and not fits(value, key_range(self.queryset, self.to_field_name)):
            raise ValidationError(self.error_messages["invalid_choice"], code="invalid_choice")
        return super().to_python(value)


class IdMultipleChoiceField(forms.ModelMultipleChoiceField):
    """A ModelMultipleChoiceField that refuses, as an invalid choice, a number the key column cannot
    hold (its `__in` query would fail on the database instead)."""

    iterator = ChoiceIterator

    def _check_values(self, value: Any) -> models.QuerySet[Any]:
        bounds = key_range(self.queryset, self.to_field_name)
        if not isinstance(value, str | bytes):
            try:
                values = list(value)
            except TypeError:
                values = []
            for one in values:
                if not isinstance(one, str | int) or fits(one, bounds):
                    continue
                raise ValidationError(
                    self.error_messages["invalid_choice"], code="invalid_choice", params={"value": one}
                )
        return super()._check_values(value)  # type: ignore[misc]  # a private Django method the stubs leave out


def formfield(db_field: models.Field[Any, Any], **kwargs: Any) -> forms.Field | None:
    """A ModelForm's `Meta.formfield_callback`: DB_FIELD's form field, with the id-checking choice
    fields for foreign keys and many-to-many fields."""
    if isinstance(db_field, models.ManyToManyField):
        kwargs.setdefault("form_class", IdMultipleChoiceField)
    elif isinstance(db_field, models.ForeignKey):
        kwargs.setdefault("form_class", IdChoiceField)
    return db_field.formfield(**kwargs)
