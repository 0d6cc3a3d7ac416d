"""What is locked when (issue 25, items 1 and 2): an entry is locked the moment anything points
at it — a correction of it or of one of its claims, an experiment whose verdict it records —
not only when its grace period ends; and SparkOps's own observed entries are locked from the
moment they are written. The database holds both (sparkops/changelog/dbguard.py), whatever
path wrote the pointer or the entry: the services, the ORM, the import, raw SQL. Run on
PostgreSQL (DATABASE_URL) and on SQLite: the triggers differ."""

import pytest
from django.db import IntegrityError, connection, models, transaction
from django.utils import timezone

from sparkops.changelog.grammar import FlagLine, parse_evidence, parse_flags
from sparkops.changelog.importer import import_log
from sparkops.changelog.models import (
    OBSERVED_AUTHOR,
    OBSERVED_MARK,
    AppendOnlyError,
    Claim,
    Correction,
    Entry,
    FlagChange,
)
from sparkops.changelog.services import correction_create, entry_create, entry_edit
from sparkops.experiments.models import Experiment
from sparkops.launch import changelog as launch_changelog

from .conftest import at

REFUSED = "append-only"


def _refused(fn):
    with pytest.raises(IntegrityError, match=REFUSED), transaction.atomic():
        fn()


def _fresh(pair, **kw):
    """An entry well inside its grace period, with a claim, a flag and evidence."""
    fields = {
        "effective_at": at("2026-08-20 09:00"),
        "kind": "claim",
        "title": "Raise the window",
        "engines": [pair["nemotron"]],
        "flags": parse_flags("--max-model-len: 131072 → 262144"),
        "claims": [{"text": "11.7 concurrent at 262144"}],
        "evidence": [parse_evidence("run:3")],
        "body_md": "original body",
        **kw,
    }
    entry = entry_create(**fields)
    assert not Entry.objects.get(pk=entry.pk).is_locked
    return entry


def _rewrites_refused(entry):
    """Every way to rewrite ENTRY's text is refused by the database, beneath the model."""
    entry = Entry.objects.get(pk=entry.pk)
    assert entry.is_locked
    _refused(lambda: Entry._base_manager.filter(pk=entry.pk).update(title="rewritten"))
    claim = entry.claims.first()
    if claim is not None:
        _refused(lambda: Claim._base_manager.filter(pk=claim.pk).update(text="11.2 concurrent"))
    _refused(lambda: FlagChange._base_manager.filter(entry=entry).update(new="64"))

    def raw():
        with connection.cursor() as cur:
            cur.execute("UPDATE changelog_entry SET body_md = 'rewritten' WHERE id = %s", [entry.pk])

    _refused(raw)
    _refused(lambda: models.Model.save(FlagChange(entry=entry, flag="--max-num-seqs", old="256", new="128")))
    with pytest.raises(AppendOnlyError):
        entry_edit(
            entry=entry,
            user=None,
            effective_at=entry.effective_at,
            title="rewritten",
            kind=entry.kind,
            engines=list(entry.engines.all()),
            claims=[{"text": "11.2 concurrent at 262144"}],
        )
    assert Entry.objects.get(pk=entry.pk).title == entry.title


# ---- item 1: anything pointing at an entry locks it ----------------------------------------------


def test_a_correction_locks_its_entry_at_once(pair):
    entry = _fresh(pair)
    before = timezone.now()
    correction_create(entry=entry, claim=entry.claims.get(), text_md="shows 11.2×, not 11.7×")
    entry = Entry.objects.get(pk=entry.pk)
    assert entry.locked_at <= timezone.now() and entry.locked_at >= before - timezone.timedelta(seconds=1)
    _rewrites_refused(entry)
    assert entry.claims.get().text == "11.7 concurrent at 262144"


@pytest.mark.parametrize("path", ["orm", "sql"])
def test_a_correction_written_by_any_path_locks_its_entry(pair, path):
    entry = _fresh(pair)
    if path == "orm":
        models.Model.save(Correction(entry=entry, text_md="not 11.7", corrected_at=timezone.now()))
    else:
        with connection.cursor() as cur:
            cur.execute(
                "INSERT INTO changelog_correction (entry_id, corrected_at, text_md, mark, author_name, created_at,"
                " content_fingerprint) VALUES (%s, %s, 'not 11.7', '', '', %s, '')",
                [entry.pk, timezone.now(), timezone.now()],
            )
    _rewrites_refused(entry)


def test_an_experiment_verdict_locks_its_entry(pair):
    entry = _fresh(pair, kind="measurement", title="A/B verdict")
    experiment = Experiment.objects.create(
        name="MTP", engine_a=pair["nemotron"], engine_b=pair["q38"], workload={}, workload_hash="abc"
    )
    Experiment.objects.filter(pk=experiment.pk).update(entry_id=entry.pk)
    _rewrites_refused(entry)
    other = _fresh(pair, kind="measurement", title="A/B verdict, written with its experiment")
    Experiment.objects.create(
        name="MTP 2", engine_a=pair["nemotron"], engine_b=pair["q38"], workload_hash="abd", entry_id=other.pk
    )
    _rewrites_refused(other)


def test_an_entry_nothing_points_at_stays_editable(pair):
    entry = _fresh(pair)
    other = _fresh(pair, title="Another")
    correction_create(entry=other, text_md="wrong")
    Experiment.objects.create(name="MTP", engine_a=pair["nemotron"], engine_b=pair["q38"], workload_hash="abc")
    edited = entry_edit(
        entry=entry,
        user=None,
        effective_at=entry.effective_at,
        title="Raise the window to 262,144",
        kind=entry.kind,
        engines=[pair["nemotron"]],
        flags=[FlagLine("--max-model-len", "131072", "262144")],
        claims=[{"text": "11.7 concurrent at 262144"}],
    )
    assert Entry.objects.get(pk=edited.pk).title == "Raise the window to 262,144"


def _edit_post(client, entry, title):
    return client.post(
        f"/changelog/{entry.pk}/edit/",
        {
            "effective_at": "2026-08-20T09:00",
            "kind": "claim",
            "title": title,
            "flags": "--max-model-len: 131072 → 262144",
            "body_md": "original body",
            "claims-TOTAL_FORMS": "1",
            "claims-INITIAL_FORMS": "1",
            "claims-0-text": "11.2 concurrent at 262144",
        },
        follow=True,
    )


def test_the_edit_page_says_a_correction_points_at_it(operator_client, pair):
    entry = _fresh(pair)
    correction_create(entry=entry, claim=entry.claims.get(), text_md="shows 11.2×, not 11.7×")
    page = operator_client.get(entry.get_absolute_url()).content.decode()
    assert 'id="edit-link"' not in page and "a correction points at it" in page
    shown = operator_client.get(f"/changelog/{entry.pk}/edit/", follow=True)
    assert shown.status_code == 200 and "a correction points at it" in shown.content.decode()
    response = _edit_post(operator_client, entry, "rewritten")
    assert response.status_code == 200 and "a correction points at it" in response.content.decode()
    entry = Entry.objects.get(pk=entry.pk)
    assert entry.title == "Raise the window" and entry.claims.get().text == "11.7 concurrent at 262144"
    assert not entry.revisions.exists()


def test_the_edit_page_says_an_experiment_points_at_it(operator_client, pair):
    entry = _fresh(pair, kind="measurement")
    experiment = Experiment.objects.create(
        name="MTP", engine_a=pair["nemotron"], engine_b=pair["q38"], workload_hash="abc", entry_id=entry.pk
    )
    response = _edit_post(operator_client, entry, "rewritten")
    assert f"the verdict of experiment {experiment.pk} points at it" in response.content.decode()
    assert Entry.objects.get(pk=entry.pk).title == "Raise the window"


# ---- item 2: SparkOps's observed entries are locked when written ---------------------------------


def test_the_observed_names_match_what_launchconfig_writes():
    assert (OBSERVED_AUTHOR, OBSERVED_MARK) == (launch_changelog.AUTHOR, launch_changelog.OBSERVED_MARK)


def _observed(pair, **kw):
    return entry_create(
        author=None,
        author_name=OBSERVED_AUTHOR,
        effective_at=timezone.now(),
        title="Observed on nemotron: --max-num-seqs 128 → 64",
        kind="flag_change",
        engines=[pair["nemotron"]],
        units="vllm-nemotron.service",
        body_md=f"{OBSERVED_MARK} in what runs, configuration snapshot 4:\n\n- `--max-num-seqs`: 128 → 64 "
        "(set in /etc/systemd/system/vllm-nemotron.service.d/30-seqs64.conf)",
        flags=[FlagLine("--max-num-seqs", "128", "64")],
        evidence=[parse_evidence("run:4")],
        **kw,
    )


def test_an_observed_entry_is_locked_when_written_with_all_its_parts(pair):
    entry = Entry.objects.get(pk=_observed(pair).pk)
    assert entry.locked_at == entry.created_at and entry.is_locked
    assert entry.fingerprint and [str(f) for f in entry.flags.all()] == ["--max-num-seqs: 128 → 64"]
    assert entry.evidence.count() == 1 and [e.name for e in entry.engines.all()] == ["nemotron"]
    _rewrites_refused(entry)
    _refused(lambda: Entry._base_manager.filter(pk=entry.pk).update(fingerprint="x" * 64))


def test_launchconfig_log_change_writes_a_locked_entry(pair):
    from dashboard.models import ConfigSnapshot

    snap = ConfigSnapshot.objects.create(engine=pair["nemotron"], observed_at=timezone.now(), data={})
    entry = launch_changelog.log_change(
        pair["nemotron"], snap, [("--max-num-seqs", "128", "64", "30-seqs64.conf")], now=timezone.now()
    )
    entry = Entry.objects.get(pk=entry.pk)
    assert entry.locked_at == entry.created_at
    _rewrites_refused(entry)


@pytest.mark.parametrize("path", ["orm", "sql", "marked-by-body"])
def test_an_observed_entry_written_by_any_path_is_locked(pair, path):
    now = timezone.now()
    if path == "orm":
        entry = Entry.objects.create(effective_at=now, kind="flag_change", title="seqs", author_name=OBSERVED_AUTHOR)
    elif path == "sql":
        with connection.cursor() as cur:
            cur.execute(
                "INSERT INTO changelog_entry (effective_at, units, kind, title, body_md, reason, expected_effect,"
                " author_name, created_at, locked_at, fingerprint) VALUES (%s, '', 'flag_change', 'seqs', '', '', '',"
                " %s, %s, %s, '')",
                [now, OBSERVED_AUTHOR, now, now + timezone.timedelta(days=1)],
            )
        entry = Entry.objects.get(title="seqs")
    else:  # an import or a person keeps the body's mark: the author is theirs, the entry still SparkOps's
        entry = models.Model.save(
            e := Entry(
                effective_at=now,
                kind="flag_change",
                title="seqs",
                author_name="otto",
                body_md=f"{OBSERVED_MARK} in what runs: 128 → 64",
                locked_at=now + timezone.timedelta(days=1),
            )
        ) or Entry.objects.get(pk=e.pk)
    entry = Entry.objects.get(pk=entry.pk)
    assert entry.locked_at == entry.created_at and entry.is_locked
    _refused(lambda: Entry._base_manager.filter(pk=entry.pk).update(title="rewritten"))


def test_an_entry_edited_into_an_observed_one_is_locked_by_that_edit(pair):
    entry = _fresh(pair)
    Entry._base_manager.filter(pk=entry.pk).update(body_md=f"{OBSERVED_MARK}: 128 → 64")
    entry = Entry.objects.get(pk=entry.pk)
    assert entry.locked_at == entry.created_at and entry.is_locked


def test_an_imported_observed_entry_is_locked_with_its_parts(pair):
    import_log(
        "# Log\n\n## 2026-08-20 09:00 · Observed on nemotron: --max-num-seqs 128 → 64\n"
        "Engines: nemotron\nKind: flag_change\nFlag: --max-num-seqs: 128 → 64\nEvidence: run:4\n\n"
        f"{OBSERVED_MARK} in what runs, configuration snapshot 4.\n",
        author_name="import",
    )
    entry = Entry.objects.get(title__startswith="Observed on nemotron")
    assert entry.author_name == "import" and entry.locked_at == entry.created_at and entry.fingerprint
    assert [str(f) for f in entry.flags.all()] == ["--max-num-seqs: 128 → 64"] and entry.evidence.count() == 1
    _rewrites_refused(entry)


def test_the_edit_page_refuses_an_observed_entry(operator_client, pair):
    entry = _observed(pair)
    page = operator_client.get(entry.get_absolute_url()).content.decode()
    assert 'id="edit-link"' not in page and "SparkOps wrote it from an observed configuration change" in page
    response = operator_client.post(
        f"/changelog/{entry.pk}/edit/",
        {
            "effective_at": "2026-08-20T09:00",
            "kind": "flag_change",
            "title": "seqs 128 → 256",
            "flags": "--max-num-seqs: 128 → 256",
            "claims-TOTAL_FORMS": "0",
            "claims-INITIAL_FORMS": "0",
        },
        follow=True,
    )
    assert response.status_code == 200
    assert "SparkOps wrote it from an observed configuration change" in response.content.decode()
    entry = Entry.objects.get(pk=entry.pk)
    assert [str(f) for f in entry.flags.all()] == ["--max-num-seqs: 128 → 64"] and not entry.revisions.exists()
