"""The field report's size (issue 14, item 5), for correctness only: the generated log of
600 entries and 150 corrections imports whole, re-imports to nothing, keeps its fenced blocks,
and the timeline's full-text search (PostgreSQL tsvector / SQLite FTS5) finds what it should.
Timings are bench/changelog_scale.py's job, not a test's."""

from dashboard.models import Engine
from sparkops.changelog.export import export_markdown
from sparkops.changelog.importer import import_log
from sparkops.changelog.models import Claim, Correction, Entry, SearchDocument
from sparkops.changelog.parse import parse_log
from sparkops.changelog.samplelog import generate
from sparkops.changelog.selectors import entry_timeline


def test_a_log_of_the_field_reports_size_imports_whole_and_is_searchable(db):
    text = generate()
    parsed = parse_log(text)
    plan = import_log(text)
    assert len(plan.new_entries) == Entry.objects.count() == 600
    assert len(plan.new_corrections) == Correction.objects.count() == 150
    assert Claim.objects.count() == sum(len(e.claims) for e in parsed)
    assert Engine.objects.filter(retired_at__isnull=False).count() == 5  # every engine: known from the log only
    fenced = sum("## the unit as it ran" in e.body for e in parsed)
    assert fenced > 50 and Entry.objects.filter(body_md__contains="## the unit as it ran").count() == fenced
    assert import_log(export_markdown()).summary().startswith("0 new entries, 0 new correction(s), 600 entries")
    assert SearchDocument.objects.count() == 600

    def found(q, **kw):
        return set(entry_timeline(text=q, **kw).values_list("pk", flat=True))

    storms = {e.pk for e in Entry.objects.filter(title__icontains="compile storm")}
    assert storms and found("compile storm") >= storms
    assert found("Compile STORM") == found("compile storm")  # case does not matter
    assert found("prefi") >= {e.pk for e in Entry.objects.filter(title__icontains="prefix-cache")}  # prefix
    assert found("compile storm nemotron") == found("compile storm") & found("nemotron")  # every word
    corrected = Correction.objects.select_related("entry").first()
    word = max(corrected.text_md.split(), key=len).strip(".")
    assert corrected.entry_id in found(word)  # a correction's text finds its entry
    assert found("max-model-len", engine=Engine.objects.get(name="q38")) <= found("max-model-len")
    assert found("!!!") == set() and found("zzzunseen") == set()


def test_a_new_correction_is_found_at_once(pair):
    from sparkops.changelog.services import correction_create, entry_create

    entry = entry_create(effective_at=parse_log("## 2026-08-20 · x\n")[0].effective_at, kind="decision", title="Split")
    assert not entry_timeline(text="quokka").exists()
    correction_create(entry=entry, text_md="A quokka-sized mistake.")
    assert list(entry_timeline(text="quokka")) == [entry]
