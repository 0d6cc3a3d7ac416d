"""Append-only in the database itself (issue 14, item 3): every path that could change or
delete a locked entry or its corrections is refused — the model's save() and delete(), the
`_base_manager`, a plain queryset's update()/delete(), a cascade from deleting its engine,
the admin, raw SQL. Run on PostgreSQL (DATABASE_URL) and on SQLite: the triggers differ."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, models, transaction
from django.db.models import ProtectedError
from django.utils import timezone

from dashboard.models import Engine
from sparkops.changelog import dbguard
from sparkops.changelog.grammar import parse_evidence, parse_flags
from sparkops.changelog.models import AppendOnlyError, Claim, Correction, Entry, EvidenceLink, FlagChange
from sparkops.changelog.services import correction_create, entry_create

from .conftest import at

REFUSED = "append-only"


def _lock(entry):
    """Backdate ENTRY to an hour ago. Moving locked_at earlier is the one change allowed."""
    written = timezone.now() - timedelta(hours=1)
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE changelog_entry SET created_at = %s, locked_at = %s WHERE id = %s",
            [written, written + timedelta(minutes=15), entry.pk],
        )
    return Entry.objects.get(pk=entry.pk)


@pytest.fixture
def locked(pair, django_user_model):
    author = django_user_model.objects.create_user(username="writer", password="writer-password-123")
    entry = entry_create(
        author=author,
        effective_at=at("2026-08-20 09:00"),
        kind="claim",
        title="Raise the window",
        engines=[pair["nemotron"], pair["q38"]],
        flags=parse_flags("--max-model-len: 131072 → 262144"),
        claims=[
            {
                "text": "allocates nothing",
                "metric": "concurrency",
                "predicted": 10.6,
                "window": 262144,
                "engine": pair["nemotron"],
            }
        ],
        evidence=[parse_evidence("https://example.test/run")],
        body_md="original body",
    )
    entry = _lock(entry)  # before its correction: the correction locks it too, at its own moment
    correction = correction_create(
        entry=entry,
        author=author,
        text_md="The pool shrank 2.7 %.",
        claim=entry.claims.get(),
        mark="superseded",
        evidence=[parse_evidence("run:12")],
    )
    return {"entry": entry, "correction": correction, "author": author, **pair}


def _refused(fn):
    with pytest.raises(IntegrityError, match=REFUSED), transaction.atomic():
        fn()


def _unchanged(locked):
    entry = Entry.objects.get(pk=locked["entry"].pk)
    assert entry.title == "Raise the window" and entry.body_md == "original body"
    assert sorted(e.name for e in entry.engines.all()) == ["nemotron", "q38"]
    assert [c.text for c in entry.claims.all()] == ["allocates nothing"]
    assert [str(f) for f in entry.flags.all()] == ["--max-model-len: 131072 → 262144"]
    assert entry.evidence.count() == 1
    correction = entry.corrections.get()
    assert correction.text_md == "The pool shrank 2.7 %." and correction.mark == "superseded"
    assert correction.evidence.count() == 1


def test_the_triggers_are_installed(db):
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
            assert set(dbguard.sqlite_trigger_names()) <= {row[0] for row in cur.fetchall()}
        else:
            cur.execute("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")
            names = {row[0] for row in cur.fetchall()}
            assert {"changelog_entry_guard", "changelog_correction_guard"} <= names
            assert {f"{t}_guard" for t in dbguard.CHILD_TABLES} <= names
            assert {f"{t}_locks_entry" for t in dbguard.POINTER_TABLES} <= names


def test_orm_save_and_delete_refused_below_the_model_guard(locked):
    entry, correction = locked["entry"], locked["correction"]
    entry.title = "Raise the window (silently fixed)"
    with pytest.raises(AppendOnlyError):
        entry.save()
    _refused(lambda: models.Model.save(entry))  # around Entry.save(): the database answers
    _refused(lambda: models.Model.save(correction))
    claim = entry.claims.get()
    claim.text = "allocates a little"
    _refused(lambda: models.Model.save(claim))
    flag = entry.flags.get()
    _refused(lambda: models.Model.delete(flag))
    _refused(lambda: models.Model.save(FlagChange(entry=entry, flag="--max-num-seqs", old="256", new="128")))
    _refused(lambda: entry.engines.remove(locked["q38"]))
    _refused(
        lambda: entry.engines.add(
            Engine.objects.create(name="late", kind="vllm", url="http://127.0.0.1:1", host=locked["host"])
        )
    )
    _unchanged(locked)


def test_base_manager_and_plain_querysets_refused(locked):
    entry = locked["entry"]
    for model, changes in (
        (Entry, {"title": "x"}),
        (Correction, {"text_md": "x"}),
        (Claim, {"text": "x"}),
        (FlagChange, {"new": "1"}),
        (EvidenceLink, {"url": "https://x.test"}),
    ):
        for manager in (model._base_manager, models.QuerySet(model)):
            _refused(lambda: manager.all().update(**changes))
    _refused(lambda: Entry.engines.through.objects.filter(entry=entry).delete())
    _refused(lambda: EvidenceLink._base_manager.all().delete())
    _refused(lambda: Claim._base_manager.filter(entry=entry).update(engine=None))
    # Corrections first (the entry PROTECTs them), then the entry: still refused.
    _refused(lambda: models.QuerySet(Correction).filter(entry=entry)._raw_delete(connection.alias))
    with transaction.atomic(), pytest.raises(ProtectedError):
        Entry._base_manager.filter(pk=entry.pk).delete()
    _unchanged(locked)


def test_a_locked_entry_without_corrections_is_not_deleted_either(pair):
    entry = _lock(
        entry_create(
            effective_at=at("2026-08-21 09:00"),
            kind="decision",
            title="Keep it",
            engines=[pair["q38"]],
            claims=[{"text": "kept"}],
        )
    )
    _refused(lambda: Entry._base_manager.filter(pk=entry.pk).delete())
    _refused(lambda: models.QuerySet(Entry).filter(pk=entry.pk)._raw_delete(connection.alias))
    assert Entry.objects.get(pk=entry.pk).claims.get().text == "kept"


def test_deleting_its_engine_cascades_nowhere(locked):
    nemotron = locked["nemotron"]
    with pytest.raises(ProtectedError), transaction.atomic():
        nemotron.delete()
    with pytest.raises(ProtectedError), transaction.atomic():
        Engine._base_manager.filter(pk=nemotron.pk).delete()
    q38 = locked["q38"]  # named by the entry only (the many-to-many link): protected as well
    with pytest.raises(ProtectedError), transaction.atomic():
        q38.delete()
    # Raw SQL: the foreign keys hold (checked now, not at commit).
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cur.execute("DELETE FROM dashboard_engine WHERE id = %s", [q38.pk])
        connection.check_constraints()
    assert Engine.objects.filter(pk__in=[nemotron.pk, q38.pk]).count() == 2
    _unchanged(locked)


def test_admin_cannot_delete_the_entry_nor_its_engine(locked, admin_client_):
    entry = locked["entry"]
    assert admin_client_.post(f"/admin/changelog/entry/{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    for engine in (locked["nemotron"], locked["q38"]):
        assert admin_client_.post(f"/admin/dashboard/engine/{engine.pk}/delete/", {"post": "yes"}).status_code == 403
    listing = admin_client_.post(
        "/admin/dashboard/engine/", {"action": "delete_selected", "_selected_action": [locked["q38"].pk], "post": "yes"}
    )
    assert listing.status_code in (200, 302)
    assert Engine.objects.filter(name="q38").exists()
    _unchanged(locked)


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE changelog_entry SET title = 'rewritten' WHERE id = {entry}",
        "UPDATE changelog_entry SET body_md = body_md || ' ' WHERE id = {entry}",
        "DELETE FROM changelog_entry WHERE id = {entry}",
        "UPDATE changelog_correction SET text_md = 'never happened' WHERE id = {correction}",
        "DELETE FROM changelog_correction WHERE id = {correction}",
        "UPDATE changelog_claim SET text = 'rewritten' WHERE entry_id = {entry}",
        "DELETE FROM changelog_claim WHERE entry_id = {entry}",
        "DELETE FROM changelog_flagchange WHERE entry_id = {entry}",
        "DELETE FROM changelog_entry_engines WHERE entry_id = {entry}",
        "UPDATE changelog_evidencelink SET url = 'https://x.test' WHERE correction_id = {correction}",
        "DELETE FROM changelog_evidencelink WHERE entry_id = {entry}",
    ],
)
def test_raw_sql_is_refused(locked, sql):
    statement = sql.format(entry=locked["entry"].pk, correction=locked["correction"].pk)

    def run():
        with connection.cursor() as cur:
            cur.execute(statement)

    _refused(run)
    _unchanged(locked)


def test_what_stays_allowed(locked):
    """A new correction (with evidence) of a locked entry; deleting the author's account (the
    name written stays); anything on an entry still inside its grace period."""
    entry = locked["entry"]
    correction_create(entry=entry, text_md="Measured again: 2.6 %.", evidence=[parse_evidence("alert:3")])
    get_user_model().objects.filter(username="writer").delete()
    entry = Entry.objects.get(pk=entry.pk)
    assert entry.author_id is None and entry.author_name == "writer"
    assert entry.corrections.count() == 2 and {c.author_id for c in entry.corrections.all()} == {None}
    fresh = entry_create(effective_at=at("2026-08-22 09:00"), kind="decision", title="Fresh", claims=[{"text": "c"}])
    Claim._base_manager.filter(entry=fresh).update(text="fixed typo")
    assert fresh.claims.get().text == "fixed typo"


def test_the_grace_period_cannot_be_extended(pair):
    fresh = entry_create(effective_at=at("2026-08-22 09:00"), kind="decision", title="Fresh")
    _refused(lambda: Entry._base_manager.filter(pk=fresh.pk).update(locked_at=timezone.now() + timedelta(days=365)))
