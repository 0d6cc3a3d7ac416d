"""Issue 51, rough edge 3: a hand-kept log whose headers are a Markdown list (`- Kind:`, `- Engines:`,
`- Flags:`, `- Claim:`) imports them as headers — the entry links its engines and carries its claim —
and the dry run says it read them so; a header-like line left in the body is named in the dry run."""

from io import StringIO

import pytest
from django.core.management import call_command

from sparkops.changelog.importer import apply_import, plan_import
from sparkops.changelog.models import Entry

pytestmark = pytest.mark.django_db

BULLETED = """## 2026-08-20 09:00 · Raise the window on vllm-main

- Kind: claim
- Engines: vllm-main
- Flags: --max-model-len: 32768 → 65536; --gpu-memory-utilization: 0.7 → 0.8
- **Claim:** the pool holds 412,000 tokens at 65,536
- Prediction: pool_tokens 412000 at 65536 on vllm-main

Measured after the restart.

## 2026-08-21 10:00 · A note
Kind: decision

Some text.
- Claim: written down in the body
"""


def test_bulleted_headers_are_read_as_headers(fleet):
    plan = plan_import(BULLETED)
    first = plan.new_entries[0]
    assert first.kind == "claim" and first.engines == ["vllm-main"]
    assert [(f.flag, f.old, f.new) for f in first.flags] == [
        ("--max-model-len", "32768", "65536"),
        ("--gpu-memory-utilization", "0.7", "0.8"),
    ]
    assert [c["text"] for c in first.claims] == ["the pool holds 412,000 tokens at 65,536"]
    assert first.claims[0]["prediction"].value == 412000 and first.body == "Measured after the restart."
    apply_import(plan)
    entry = Entry.objects.get(title="Raise the window on vllm-main")
    assert list(entry.engines.values_list("name", flat=True)) == ["vllm-main"]
    assert entry.kind == "claim" and entry.claims.get().text == "the pool holds 412,000 tokens at 65,536"
    assert entry.flags.count() == 2 and "Kind:" not in entry.body_md


def test_the_dry_run_says_what_it_read_and_names_a_header_left_in_the_body(fleet, tmp_path):
    out = StringIO()
    path = tmp_path / "log.md"
    path.write_text(BULLETED)
    call_command("changelog", "import", str(path), "--dry-run", stdout=out)
    text = out.getvalue()
    assert "line 3: headers written as a list ('- Kind:', '- Engines:' …) are read as headers" in text, text
    assert "line 15: '- Claim: written down in the body' is in the body, not a header" in text, text
    assert not Entry.objects.exists()
