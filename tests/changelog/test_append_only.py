"""Append-only: after the grace period there is no update path, not in the model, the ORM's
bulk paths, the views, nor the admin."""

from datetime import timedelta

import pytest
from django.utils import timezone

from sparkops.changelog.grammar import parse_evidence, parse_flags
from sparkops.changelog.models import AppendOnlyError, Claim, Correction, Entry, EvidenceLink, FlagChange, grace_period
from sparkops.changelog.services import correction_create, entry_create

from .conftest import at


def _entry(author=None, written=None, **kw):
    entry = entry_create(
        author=author,
        effective_at=at("2026-08-20 09:00"),
        kind="claim",
        title="Raise the window",
        flags=parse_flags("--max-model-len: 131072 → 262144"),
        claims=[{"text": "allocates nothing"}],
        body_md="original body",
        **kw,
    )
    if written is not None:
        # Backdating goes around the guard on purpose: the test needs an entry written an hour ago.
        from django.db import connection

        with connection.cursor() as cur:
            cur.execute(
                "UPDATE changelog_entry SET created_at = %s, locked_at = %s WHERE id = %s",
                [written, written + grace_period(), entry.pk],
            )
        entry = Entry.objects.get(pk=entry.pk)
    return entry


def test_model_refuses_every_write_after_the_grace_period(db):
    entry = _entry(written=timezone.now() - timedelta(hours=1), evidence=[parse_evidence("https://example.test/run")])
    assert entry.is_locked
    entry.title = "Raise the window (silently fixed)"
    with pytest.raises(AppendOnlyError):
        entry.save()
    with pytest.raises(AppendOnlyError):
        entry.delete()
    claim = entry.claims.get()
    claim.text = "allocates a little"
    with pytest.raises(AppendOnlyError):
        claim.save()
    with pytest.raises(AppendOnlyError):
        FlagChange.objects.create(entry=entry, flag="--max-num-seqs", old="256", new="128")
    with pytest.raises(AppendOnlyError):
        Claim.objects.create(entry=entry, text="a claim slipped in later")
    with pytest.raises(AppendOnlyError):
        EvidenceLink.objects.create(entry=entry, url="https://example.test/later")
    for part in (claim, entry.flags.get(), entry.evidence.get()):
        with pytest.raises(AppendOnlyError, match="locked"):
            part.delete()
    stored = Entry.objects.get(pk=entry.pk)
    assert stored.title == "Raise the window" and stored.claims.get().text == "allocates nothing"
    assert stored.flags.count() == 1 and stored.evidence.count() == 1


def test_bulk_update_and_delete_are_refused(db):
    _entry()
    for qs in (Entry.objects.all(), Claim.objects.all(), FlagChange.objects.all(), Correction.objects.all()):
        with pytest.raises(AppendOnlyError):
            qs.update(pk=0) if qs.model is not Entry else qs.update(title="x")
        with pytest.raises(AppendOnlyError):
            qs.delete()
    assert Entry.objects.get().title == "Raise the window"


def test_a_correction_is_never_edited(db):
    entry = _entry()
    c = correction_create(entry=entry, text_md="Cost 2.7 % of the pool.")
    c.text_md = "Cost nothing."
    with pytest.raises(AppendOnlyError):
        c.save()
    with pytest.raises(AppendOnlyError):
        c.delete()
    assert Correction.objects.get().text_md == "Cost 2.7 % of the pool."


def test_edit_inside_the_grace_period_keeps_and_shows_the_history(operator_client, operator):
    entry = _entry(author=operator)
    response = operator_client.post(
        f"/changelog/{entry.pk}/edit/",
        {
            "effective_at": "2026-08-20T09:00",
            "kind": "claim",
            "title": "Raise the window to 262,144",
            "flags": "--max-model-len: 131072 → 262144",
            "body_md": "fixed body",
            "units": "",
            "reason": "",
            "expected_effect": "",
            "claims-TOTAL_FORMS": "1",
            "claims-INITIAL_FORMS": "1",
            "claims-0-text": "allocates nothing",
        },
    )
    assert response.status_code == 302
    entry = Entry.objects.get(pk=entry.pk)
    assert entry.title == "Raise the window to 262,144" and entry.body_md == "fixed body"
    revision = entry.revisions.get()
    assert revision.snapshot["title"] == "Raise the window" and revision.snapshot["body_md"] == "original body"
    page = operator_client.get(entry.get_absolute_url()).content.decode()
    assert "Edit history (1 edit" in page and "original body" in page


def test_edit_view_after_the_grace_period_changes_nothing(operator_client, operator):
    entry = _entry(author=operator, written=timezone.now() - timedelta(hours=1))
    page = operator_client.get(entry.get_absolute_url()).content.decode()
    assert 'id="edit-link"' not in page and "locked: corrections only" in page
    response = operator_client.post(
        f"/changelog/{entry.pk}/edit/",
        {
            "effective_at": "2026-08-20T09:00",
            "kind": "claim",
            "title": "rewritten history",
            "claims-TOTAL_FORMS": "0",
            "claims-INITIAL_FORMS": "0",
        },
        follow=True,
    )
    assert "write a correction instead" in response.content.decode()
    assert Entry.objects.get(pk=entry.pk).title == "Raise the window" and not entry.revisions.exists()


def test_admin_is_read_only_even_for_superusers(admin_client_):
    entry = _entry()
    correction = correction_create(entry=entry, text_md="Cost 2.7 %.")
    change_url = f"/admin/changelog/entry/{entry.pk}/change/"
    page = admin_client_.get(change_url)
    assert page.status_code == 200 and 'name="title"' not in page.content.decode()  # shown, not editable
    assert admin_client_.post(change_url, {"title": "rewritten", "kind": "claim"}).status_code == 403
    assert admin_client_.get(f"/admin/changelog/entry/{entry.pk}/delete/").status_code == 403
    assert admin_client_.post(f"/admin/changelog/entry/{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    assert admin_client_.get("/admin/changelog/entry/add/").status_code == 403
    listing = admin_client_.post(
        "/admin/changelog/entry/", {"action": "delete_selected", "_selected_action": [entry.pk]}
    )
    assert listing.status_code in (200, 302)
    assert (
        admin_client_.post(f"/admin/changelog/correction/{correction.pk}/change/", {"text_md": "x"}).status_code == 403
    )
    assert Entry.objects.get(pk=entry.pk).title == "Raise the window"
    assert Correction.objects.get().text_md == "Cost 2.7 %."
