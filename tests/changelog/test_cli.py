"""`sparkops changelog import|export` through the management command."""

import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from sparkops.changelog.models import Entry

FIXTURE = Path(__file__).parent.parent / "fixtures" / "changelog" / "spark-config-log.md"


def run(*args):
    import io

    out = io.StringIO()
    call_command("changelog", *args, stdout=out)
    return out.getvalue()


def test_dry_run_reports_and_writes_nothing(pair):
    out = run("import", str(FIXTURE), "--dry-run")
    assert "+ entry  line 15: 2026-08-20 09:00 · Raise --max-model-len to 262,144 on both engines" in out
    assert out.strip().endswith(
        "dry run: would create 3 new entries, 2 new correction(s), 0 entries already in the log"
    )
    assert Entry.objects.count() == 0


def test_import_twice_then_export(pair, operator):
    assert (
        run("import", str(FIXTURE), "--author", "otto")
        .strip()
        .endswith("imported: 3 new entries, 2 new correction(s), 0 entries already in the log")
    )
    assert Entry.objects.filter(author=operator).count() == 3
    assert (
        run("import", str(FIXTURE)).strip().endswith("0 new entries, 0 new correction(s), 3 entries already in the log")
    )
    md = run("export")
    assert md.startswith("# SparkOps change log\n") and md.count("\n## ") == 3
    data = json.loads(run("export", "--format", "json"))
    assert [e["kind"] for e in data] == ["decision", "claim", "incident_note"]
    assert data[1]["corrections"][0]["mark"] == "superseded" and data[1]["claims"][0]["predicted"] == 10.6


def test_malformed_file_is_refused_with_the_line(pair, tmp_path):
    bad = tmp_path / "log.md"
    bad.write_text("## 2026-08-20 · ok\nKind: claim\nFlag: --max-model-len 131072\n")
    with pytest.raises(CommandError, match=r"log.md: line 3: a flag change reads .*; nothing imported"):
        run("import", str(bad))
    with pytest.raises(CommandError, match="cannot read"):
        run("import", str(tmp_path / "missing.md"))
    assert Entry.objects.count() == 0
