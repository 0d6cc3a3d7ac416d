"""Issue 45, item 6: an entry SparkOps writes (an action, its outcome, an observation, a decision)
is locked when written, on every path: the edit page (GET and POST), the service, the model, the
admin, and the database itself (raw SQL; an INSERT that asks for a grace period gets none). A
correction beside it stays the way to add to it. Run on PostgreSQL (DATABASE_URL) and on SQLite."""

from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.db import IntegrityError, connection, transaction
from django.urls import reverse

from sparkops.changelog.models import AppendOnlyError, Entry
from sparkops.changelog.services import correction_create, entry_create, entry_edit

from .conftest import at

DONE = "systemctl restart vllm-nemotron.service on spark: done"


def _written(pair, *, author_name):
    """What the box's worker writes after a restart (dashboard/unit_actions.py's note)."""
    return entry_create(
        author=None,
        author_name=author_name,
        effective_at=at("2026-08-20 09:00"),
        title=DONE,
        kind="incident_note",
        engines=[pair["nemotron"]],
        units="vllm-nemotron.service",
        body_md="From the engine card of nemotron on spark.",
    )


@pytest.fixture(params=["sparkops", "SparkOps"])  # the worker's old name for itself, and its one name now
def done(request, pair):
    return _written(pair, author_name=request.param)


def _unchanged(entry):
    fresh = Entry.objects.get(pk=entry.pk)
    assert fresh.title == DONE and fresh.kind == "incident_note" and fresh.locked_at == fresh.created_at
    assert [e.name for e in fresh.engines.all()] == ["nemotron"]


def test_it_is_locked_from_its_insert_and_says_why(done):
    assert done.locked_at == done.created_at and done.is_locked
    assert done.lock_reason == "SparkOps wrote it, the record of what it did or decided as it happened"


def test_the_edit_page_refuses_it(done, admin_client_):
    url = reverse("changelog:edit", args=[done.pk])
    for answer in (
        admin_client_.get(url),
        admin_client_.post(
            url, {"title": "FAILED (edited)", "kind": "incident_note", "effective_at": "2026-08-20T09:00"}
        ),
    ):
        assert answer.status_code == 302 and answer.headers["location"] == done.get_absolute_url()
        said = [str(m) for m in get_messages(answer.wsgi_request)]
        assert said[-1] == (
            "Nothing can be edited: this entry is locked: SparkOps wrote it, the record of what it did or decided "
            "as it happened; write a correction instead."
        )
    page = admin_client_.get(done.get_absolute_url()).text
    assert "locked: corrections only (SparkOps wrote it" in page and f'href="{url}"' not in page
    _unchanged(done)


def test_the_service_and_the_model_refuse_it(done, admin_user):
    with pytest.raises(AppendOnlyError, match="SparkOps wrote it"):
        entry_edit(
            entry=done,
            user=admin_user,
            effective_at=done.effective_at,
            title="FAILED (edited)",
            kind="incident_note",
            engines=[],
        )
    done.title = "FAILED (edited)"
    with pytest.raises(AppendOnlyError, match="locked"):
        done.save()
    _unchanged(done)


def test_the_admin_cannot_change_it(done, admin_client_):
    url = reverse("admin:changelog_entry_change", args=[done.pk])
    admin_client_.post(url, {"title": "FAILED (edited)", "kind": "incident_note"})
    _unchanged(done)


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE changelog_entry SET title = 'FAILED (edited)' WHERE id = {entry}",
        "UPDATE changelog_entry SET author_name = 'alice' WHERE id = {entry}",
        "DELETE FROM changelog_entry_engines WHERE entry_id = {entry}",
        "DELETE FROM changelog_entry WHERE id = {entry}",
    ],
)
def test_the_database_refuses_it(done, sql):
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic(), connection.cursor() as cur:
        cur.execute(sql.format(entry=done.pk))
    _unchanged(done)


def test_an_insert_by_any_path_gets_no_grace_period(pair):
    """Below the model: a row that names SparkOps as its author is locked at its creation by the
    database, whatever locked_at the INSERT asked for."""
    created = at("2026-08-20 09:00")
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO changelog_entry (effective_at, units, kind, title, body_md, reason, expected_effect,"
            " author_name, created_at, locked_at, fingerprint) VALUES (%s, '', 'decision', 'Forced launch', '',"
            " '', '', 'SparkOps', %s, %s, 'raw')",
            [created, created, created + timedelta(days=3650)],
        )
    entry = Entry.objects.get(fingerprint="raw")
    assert entry.locked_at == created and entry.is_locked


def test_a_correction_beside_it_is_how_to_add_to_it(done):
    correction_create(entry=done, text_md="It came back at 09:02 only.", mark="note")
    assert done.corrections.count() == 1
    _unchanged(done)


def test_a_persons_entry_keeps_its_grace_period(pair, admin_user):
    mine = entry_create(
        author=admin_user, effective_at=at("2026-08-20 09:00"), title="Restarted by hand", kind="incident_note"
    )
    assert not mine.is_locked
    entry_edit(
        entry=mine,
        user=admin_user,
        effective_at=mine.effective_at,
        title="Restarted it by hand",
        kind="incident_note",
        engines=[],
    )
    assert Entry.objects.get(pk=mine.pk).title == "Restarted it by hand"
