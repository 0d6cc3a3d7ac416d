"""Liberal where the meaning is clear, strict where it is not (issue 14, item 2): hand-kept
logs use other title separators, other spellings of a kind, and code blocks that hold lines
looking like the log's own structure."""

from io import StringIO

import pytest
from django.core.management import call_command

from sparkops.changelog.export import export_markdown
from sparkops.changelog.importer import apply_import, plan_import
from sparkops.changelog.models import Entry
from sparkops.changelog.parse import LogSyntaxError, parse_log

FENCED = """## 2026-08-21 10:00 — Pin the chat template
Engines: nemotron
kind: Flag-Change
Flag: --chat-template: default → tool-use.jinja
Claim: the default template drops tool calls

The unit now reads:

```ini
## not an entry: a comment in the unit
> Correction 2026-08-22: not a correction either
ExecStart=/usr/bin/vllm serve
```

~~~~text
## also inside
~~~
still inside: a shorter fence does not close it
~~~~

> Correction 2026-08-23 (claim 1, superseded): it was the template.

And this paragraph sits after the correction.
"""


@pytest.mark.parametrize(
    "heading,title",
    [
        ("## 2026-08-20 09:00 · Raise the window", "Raise the window"),
        ("## 2026-08-20 09:00 — Raise the window", "Raise the window"),
        ("## 2026-08-20 – Raise the window", "Raise the window"),
        ("## 2026-08-20 09:00 - Raise the window - both engines", "Raise the window - both engines"),
        ("## 2026-08-20: Raise the window", "Raise the window"),
        ("## 2026-08-20 09:00: Raise the window: 262,144", "Raise the window: 262,144"),
    ],
)
def test_a_heading_that_starts_with_a_date_is_an_entry_whatever_the_separator(heading, title):
    (entry,) = parse_log(heading + "\n\nBody.\n")
    assert entry.title == title and entry.effective_at.date().isoformat() == "2026-08-20"


@pytest.mark.parametrize(
    "written,kind",
    [
        ("Kind: flag change", "flag_change"),
        ("Kind: Flag-Change", "flag_change"),
        ("kind: claim", "claim"),
        ("KIND: Incident Note", "incident_note"),
        ("Kind: incident-note", "incident_note"),
        ("kind:  MEASUREMENT", "measurement"),
        ("Kind: decision", "decision"),
    ],
)
def test_kind_spellings(written, kind):
    (entry,) = parse_log(f"## 2026-08-20 · t\n{written}\n")
    assert entry.kind == kind


def test_fenced_blocks_hold_headings_and_corrections_as_text(pair):
    (entry,) = parse_log(FENCED)
    assert entry.kind == "flag_change" and entry.engines == ["nemotron"]
    assert "## not an entry: a comment in the unit" in entry.body
    assert "> Correction 2026-08-22: not a correction either" in entry.body
    assert "still inside: a shorter fence does not close it" in entry.body
    assert [(c.text, c.claim, c.mark) for c in entry.corrections] == [("it was the template.", 1, "superseded")]
    assert entry.body.endswith("And this paragraph sits after the correction.")
    assert entry.notes == [(23, "text after the correction of line 21 is kept as the entry's body")]


def test_a_fenced_log_round_trips(pair):
    apply_import(plan_import(FENCED))
    first = export_markdown()
    assert Entry.objects.count() == 1 and Entry.objects.get().corrections.count() == 1
    assert plan_import(first).summary().startswith("0 new entries, 0 new correction(s), 1 entry already")
    (again,) = parse_log(first)
    assert again.body == Entry.objects.get().body_md and "## also inside" in again.body


def test_dry_run_reports_the_text_after_a_correction(pair, tmp_path):
    log = tmp_path / "fenced.md"
    log.write_text(FENCED)
    out = StringIO()
    call_command("changelog", "import", str(log), "--dry-run", stdout=out)
    assert "note  line 23: text after the correction of line 21 is kept as the entry's body" in out.getvalue()
    assert "would create 1 new entry, 1 new correction(s)" in out.getvalue() and not Entry.objects.exists()


@pytest.mark.parametrize(
    "text,line,message",
    [
        ("## 2026-02-30 — Leap day that is not\n", 1, "a date reads"),
        ("## 2026-08-20: ok\nkind: claim\nprediction: concurrency 10.6\n", 3, "must follow the 'Claim:' line"),
        ("## 2026-08-20 - ok\nClaim: x\nPrediction: vibes 10\n", 3, "unknown metric 'vibes'"),
        ("## 2026-08-20 - ok\nKind: hunch\n", 2, "unknown kind 'hunch'"),
        ("## 2026-08-20 - ok\n\n```\n## never closed\n\n## 2026-08-21 - swallowed\n", 3, "never closed"),
        ("## Notes\n", 1, "put the line in a code fence"),
    ],
)
def test_still_strict_where_the_meaning_is_not_clear(pair, text, line, message):
    with pytest.raises(LogSyntaxError) as err:
        plan_import("## 2026-08-01 · first\n\n" + text)
    assert err.value.line == line + 2 and message in str(err.value)
    assert not Entry.objects.exists()


def test_the_entry_form_accepts_a_fenced_body(operator_client):
    body = "Unit:\n\n```\n## a comment\n> Correction 2026-01-01: not one\n```\n"
    form = {
        "effective_at": "2026-08-20T09:00",
        "kind": "decision",
        "title": "Fenced",
        "flags": "",
        "body_md": body,
        "units": "",
        "reason": "",
        "expected_effect": "",
        "claims-TOTAL_FORMS": "0",
        "claims-INITIAL_FORMS": "0",
    }
    assert operator_client.post("/changelog/new/", form).status_code == 302
    assert "## a comment" in Entry.objects.get().body_md
    refused = operator_client.post("/changelog/new/", {**form, "title": "Open", "body_md": "```\n## x\n"})
    assert refused.status_code == 200 and "never closed" in refused.content.decode()
