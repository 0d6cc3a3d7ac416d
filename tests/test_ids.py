"""A number no row can have is a form error or a 404, on every database, in every choice field and
URL id of the project (dashboard/forms/ids.py); issue 24."""

import importlib
import pkgutil

import pytest
from django import forms
from django.contrib import admin
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.urls.exceptions import Resolver404
from django.utils import timezone

import dashboard
import sparkops
from dashboard.forms.ids import IdChoiceField, IdMultipleChoiceField

HUGE = "99999999999999999999999"
PAST_ANY_ID = [HUGE, "-" + HUGE, "9223372036854775808", "-9223372036854775809"]


def _entry_form(**fields):
    return {
        "effective_at": timezone.localtime().strftime("%Y-%m-%dT%H:%M"),
        "kind": "decision",
        "title": "t",
        "claims-TOTAL_FORMS": "0",
        "claims-INITIAL_FORMS": "0",
        **fields,
    }


@pytest.mark.django_db
@pytest.mark.parametrize("number", PAST_ANY_ID)
def test_entry_engines_past_any_id_are_a_form_error(operator_client, fleet, number):
    from sparkops.changelog.models import Entry

    response = operator_client.post("/changelog/new/", _entry_form(engines=[str(fleet["vllm"].pk), number]))
    assert response.status_code == 200
    assert f"Select a valid choice. {number} is not one of the available choices." in response.content.decode()
    assert not Entry.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("number", PAST_ANY_ID)
def test_incident_close_with_entries_past_any_id_is_a_form_error(operator_client, fleet, number):
    from dashboard.models import Incident

    incident = Incident.objects.create(opened_at=timezone.now(), trigger="kernel_fault: Xid 79")
    response = operator_client.post(
        f"/changelog/ledgers/incidents/{incident.pk}/close/",
        {"closed_at": timezone.localtime().strftime("%Y-%m-%dT%H:%M"), "fix_that_held": "reseated", "entries": number},
    )
    assert response.status_code == 200 and "is not one of the available choices" in response.content.decode()
    incident.refresh_from_db()
    assert incident.closed_at is None


@pytest.mark.django_db
@pytest.mark.parametrize("number", PAST_ANY_ID)
def test_the_choice_fields_refuse_ids_past_the_key_column(fleet, number):
    from dashboard.models import Engine

    many = IdMultipleChoiceField(queryset=Engine.objects.all())
    one = IdChoiceField(queryset=Engine.objects.all())
    for field, value in ((many, [number]), (many, [str(fleet["vllm"].pk), number]), (one, number)):
        with pytest.raises(forms.ValidationError) as refused:
            field.clean(value)
        assert refused.value.code == "invalid_choice"
    # In range, the rows the fields always took; absent but in range, the same invalid choice.
    assert list(many.clean([str(fleet["vllm"].pk)])) == [fleet["vllm"]] and one.clean(fleet["vllm"].pk) == fleet["vllm"]
    with pytest.raises(forms.ValidationError, match="not one of the available choices"):
        many.clean(["9223372036854775807"])
    with pytest.raises(forms.ValidationError, match="valid value"):
        many.clean(["1e3"])


@pytest.mark.django_db
def test_the_choice_fields_read_their_choices_in_one_query_each_time(fleet):
    """No server-side cursor (on PostgreSQL Django's own iterator DECLAREs one: three round trips a
    field a rendering), and a rendering after a change shows the change (no cached choices)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from dashboard.models import Engine

    for field in (IdMultipleChoiceField(queryset=Engine.objects.order_by("name")), IdChoiceField(Engine.objects.all())):
        with CaptureQueriesContext(connection) as queries:
            names = sorted(label for value, label in field.choices if value)
        assert names == ["llama-side", "vllm-main"]
        assert [q["sql"].split()[0] for q in queries.captured_queries] == ["SELECT"], queries.captured_queries
        Engine.objects.create(name=f"added-{len(names)}", kind="vllm", url="http://127.0.0.1:9", host=fleet["host"])
        assert len([label for value, label in field.choices if value]) == 3
        Engine.objects.filter(name__startswith="added-").delete()


def _project_forms():
    """Every form class the project defines, its views and admins imported (their URLconf loads them)."""
    get_resolver().url_patterns  # noqa: B018  (imports every view, so every form)
    admin.autodiscover()
    for package in (dashboard, sparkops):
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if module.name.endswith(("forms", "views", "timeline", "admin")):
                importlib.import_module(module.name)
    found, todo = set(), [forms.BaseForm]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return [form for form in found if form.__module__.startswith(("dashboard.", "sparkops."))]


def test_every_choice_field_of_the_project_checks_ids():
    plain = []
    project_forms = _project_forms()
    for form in project_forms:
        for name, field in form.base_fields.items():
            if isinstance(field, forms.ModelChoiceField) and not isinstance(
                field, IdChoiceField | IdMultipleChoiceField
            ):
                plain.append(f"{form.__module__}.{form.__name__}.{name}: {type(field).__name__}")
    assert len(project_forms) > 10, "the project's forms were not found"
    assert not plain, "use dashboard.forms.ids (IdChoiceField, or Meta.formfield_callback = ids.formfield): " + str(
        plain
    )


def _patterns(resolver, prefix=""):
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            yield from _patterns(entry, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry.pattern.converters


def test_no_url_pattern_takes_a_plain_int():
    from django.urls.converters import IntConverter

    plain = [
        route
        for route, converters in _patterns(get_resolver())
        if any(type(c) is IntConverter for c in converters.values())
    ]
    assert not plain, f"take row ids with <id:pk> (dashboard/converters.py IdConverter), not <int:pk>: {plain}"


def test_url_ids_run_from_1_to_the_largest_bigint():
    assert resolve("/alerts/9223372036854775807/").kwargs == {"pk": 9223372036854775807}
    assert resolve("/changelog/1/edit/").kwargs == {"pk": 1}
    for number in ("0", "9223372036854775808", HUGE):
        with pytest.raises(Resolver404):
            resolve(f"/alerts/{number}/")


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/alerts/{}/", "/changelog/{}/edit/", "/changelog/ledgers/incidents/{}/close/"])
def test_url_ids_past_any_row_are_404(operator_client, path):
    for number in ("9223372036854775807", "9223372036854775808", HUGE):
        assert operator_client.get(path.format(number)).status_code == 404
