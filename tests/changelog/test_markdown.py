"""The Markdown log grammar: good files, each kind of malformed line, duplicates, round trip."""

from pathlib import Path

import pytest

from sparkops.changelog.export import export_markdown
from sparkops.changelog.importer import apply_import, plan_import
from sparkops.changelog.models import Claim, Correction, Entry, EvidenceLink, FlagChange
from sparkops.changelog.parse import LogSyntaxError, parse_log

FIXTURE = Path(__file__).parent.parent / "fixtures" / "changelog" / "spark-config-log.md"


def load(text):
    plan = plan_import(text)
    apply_import(plan)
    return plan


def test_field_report_log_imports_with_claims_predictions_and_corrections(pair):
    plan = load(FIXTURE.read_text())
    assert plan.summary() == "3 new entries, 2 new correction(s), 0 entries already in the log"
    raise_ = Entry.objects.get(title="Raise --max-model-len to 262,144 on both engines")
    assert raise_.kind == "claim" and raise_.effective_at.isoformat() == "2026-08-20T09:00:00+00:00"
    assert sorted(raise_.engines.values_list("name", flat=True)) == ["nemotron", "q38"]
    assert raise_.units == "vllm-nemotron.service, vllm-q38.service"
    assert [(f.flag, f.old, f.new) for f in raise_.flags.all()] == [("--max-model-len", "131072", "262144")]
    first, second = raise_.claims.all()
    assert first.text == "raising --max-model-len 131,072 → 262,144 allocates nothing"
    assert (first.metric, first.predicted, first.window, first.engine) == (
        "concurrency",
        10.6,
        262144,
        pair["nemotron"],
    )
    assert second.engine == pair["q38"] and second.predicted == 3.6
    assert raise_.body_md.startswith("vLLM sizes its KV pool at boot") and raise_.body_md.endswith(
        "tokens across the same raise."
    )
    c1, c2 = raise_.corrections.all()
    assert c1.claim == first and c1.mark == "superseded" and c1.corrected_at.isoformat() == "2026-08-20T14:00:00+00:00"
    assert c1.text_md.startswith("Cheap, not free.") and "\n\nvLLM reserves non-KV workspace" in c1.text_md
    assert [e.url for e in c1.evidence.all()] == ["https://example.test/vllm-config-log#2026-08-20"]
    assert c2.claim == second
    restart = Entry.objects.get(kind="incident_note")
    assert str(restart.flags.get()) == "Restart: on-failure → always"
    assert Entry.objects.get(kind="decision").reason.startswith("Split evenly")


def test_importing_twice_creates_nothing_new(pair):
    load(FIXTURE.read_text())
    counts = [m.objects.count() for m in (Entry, Claim, FlagChange, Correction, EvidenceLink)]
    again = plan_import(FIXTURE.read_text())
    assert again.summary() == "0 new entries, 0 new correction(s), 3 entries already in the log"
    apply_import(again)
    assert [m.objects.count() for m in (Entry, Claim, FlagChange, Correction, EvidenceLink)] == counts


def test_a_correction_appended_to_the_file_later_is_the_only_thing_imported(pair):
    load(FIXTURE.read_text())
    more = FIXTURE.read_text() + "\n> Correction 2026-09-01: Restart=always held through two more crashes.\n"
    plan = plan_import(more)
    assert plan.summary() == "0 new entries, 1 new correction(s), 3 entries already in the log"
    apply_import(plan)
    assert Entry.objects.get(kind="incident_note").corrections.get().text_md.startswith("Restart=always held")


def test_duplicate_entries_inside_one_file_are_created_once(pair):
    one = "## 2026-08-19 · Same thing\nKind: decision\n\nBody.\n"
    plan = load(one + "\n" + one)
    assert plan.summary() == "1 new entry, 0 new correction(s), 1 entry already in the log"
    assert Entry.objects.count() == 1


def test_export_import_export_is_identical(pair):
    load(FIXTURE.read_text())
    first = export_markdown()
    assert len(parse_log(first)) == 3
    # A database built only from the export must export the same bytes.
    _wipe_log()
    load(first)
    assert export_markdown() == first
    assert "Prediction: concurrency 10.6 at 262144 on nemotron" in first
    assert "> Correction 2026-08-20 14:00 (claim 1, superseded): Cheap, not free." in first
    assert ">\n> vLLM reserves" in first


def _wipe_log():
    """Test-only teardown through raw SQL: the models themselves refuse deletion, and so does
    the database for the entries the fixture's corrections locked: its triggers are set aside
    for the wipe and put back (all inside the test's transaction)."""
    from django.db import connection

    from sparkops.changelog import dbguard

    class Editor:  # what dbguard.install()/uninstall() use of a schema editor
        def __init__(self, cur):
            self.connection, self.cur = connection, cur

        def execute(self, sql, params=None):
            self.cur.execute(sql, params)

    with connection.cursor() as cur:
        dbguard.uninstall(Editor(cur))
        for table in (
            "searchdocument",
            "evidencelink",
            "correction",
            "flagchange",
            "claim",
            "entryrevision",
            "entry_engines",
            "entry_incidents",
            "entry",
        ):
            cur.execute(f"DELETE FROM changelog_{table}")
        dbguard.install(Editor(cur))


MALFORMED = [
    ("## 2026-08-20 Raise the window\n", 1, "heading reads"),
    ("## 2026-13-40 · Bad date\n", 1, "a date reads"),
    ("## 2026-08-20 · ok\nKind: opinion\n", 2, "unknown kind 'opinion'"),
    ("## 2026-08-20 · ok\nFlag: --max-model-len 131072 262144\n", 2, "a flag change reads"),
    ("## 2026-08-20 · ok\nEngines: nemotron, ghost/ship\n", 2, "'ghost/ship' cannot be an engine name"),
    ("## 2026-08-20 · ok\nKind: claim\nKind: decision\n", 3, "appears twice"),
    ("## 2026-08-20 · ok\nPrediction: concurrency 10.6\n", 2, "must follow the 'Claim:' line"),
    ("## 2026-08-20 · ok\nClaim: x\nPrediction: vibes 10\n", 3, "unknown metric 'vibes'"),
    ("## 2026-08-20 · ok\nEvidence: ftp://x\n", 2, "evidence is a URL"),
    ("## 2026-08-20 · ok\nReason:\n", 2, "has no value"),
    ("## 2026-08-20 · ok\n\nbody\n\n> Correction 20-08-2026: wrong date\n", 5, "a correction starts"),
    ("## 2026-08-20 · ok\n\n> Correction 2026-08-21 (claim 2): no such claim\n", 3, "claim 2 does not exist"),
    ("## 2026-08-20 · ok\nClaim: c\n\n> Correction 2026-08-21 (withdrawn): which claim?\n", 4, "applies to one claim"),
    (
        "## 2026-08-20 · ok\nClaim: c\n\n> Correction 2026-08-21 (claim 1, retracted): x\n",
        4,
        "unknown correction option",
    ),
    ("## 2026-08-20 · ok\n\n> Correction 2026-08-21:\n", 3, "needs text"),
    ("just notes, no entries\n", 1, "no entries"),
]


@pytest.mark.parametrize("text,line,message", MALFORMED)
def test_malformed_input_is_refused_with_the_line_number_and_nothing_is_written(pair, text, line, message):
    good = "## 2026-08-01 · A good entry first\nKind: decision\n\n"
    shifted = text if text.startswith("just") else good + text
    expected_line = line if text.startswith("just") else line + 3
    with pytest.raises(LogSyntaxError) as err:
        plan_import(shifted)
    assert err.value.line == expected_line, str(err.value)
    assert message in str(err.value) and str(err.value).startswith(f"line {expected_line}:")
    assert Entry.objects.count() == 0
