"""A real log imports whole (issue 14, item 1): names of engines SparkOps does not watch
become retired engine records, the import says so, and an export imports into an empty
database (a new box) and exports the same bytes again."""

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

from django.conf import settings
from django.core.management import call_command

from dashboard.models import Engine
from sparkops.changelog.export import export_markdown
from sparkops.changelog.importer import apply_import, plan_import
from sparkops.changelog.models import Entry

FIXTURE = Path(__file__).parent.parent / "fixtures" / "changelog" / "spark-config-log.md"

OLD_ENGINES_LOG = """# Field log, spring

## 2026-04-02 09:00 · Start the 4B utility model beside the driver
Engines: util-4b, driver-80b
Kind: decision
Claim: two engines fit in 128 GB with 0.30 each
Prediction: pool_tokens 1200000 on driver-80b

The 4B model routes tool calls.

> Correction 2026-04-20 (claim 1, withdrawn): they did not fit; the driver OOMed at 0.30.

## 2026-05-10 · Vision sidecar retired
Engines: vision-sidecar
Kind: incident_note

Nobody used it.
"""


def run(*args):
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_unknown_engines_become_retired_records_and_the_import_says_so(pair, tmp_path):
    log = tmp_path / "old.md"
    log.write_text(OLD_ENGINES_LOG)
    dry = run("changelog", "import", str(log), "--dry-run")
    assert "+ engine  line 4: driver-80b (retired" in dry and "+ engine  line 14: vision-sidecar (retired" in dry
    assert "3 retired engine record(s) for names the log knows: driver-80b, util-4b, vision-sidecar" in dry
    assert not Engine.objects.filter(name__in=["util-4b", "driver-80b", "vision-sidecar"]).exists()  # dry run
    out = run("changelog", "import", str(log))
    assert "imported: 2 new entries, 1 new correction(s), 0 entries already in the log, 3 retired" in out
    retired = Engine.objects.filter(name__in=["util-4b", "driver-80b", "vision-sidecar"])
    assert retired.count() == 3 and all(e.retired_at and not e.expected_up for e in retired)
    entry = Entry.objects.get(title__startswith="Start the 4B")
    assert sorted(entry.engines.values_list("name", flat=True)) == ["driver-80b", "util-4b"]
    assert entry.claims.get().engine.name == "driver-80b"
    assert "no engine" not in run("engine", "list")
    # Importing again creates nothing, engines included; and a retired record can be watched later.
    assert "0 new entries, 0 new correction(s), 2 entries already in the log" in run("changelog", "import", str(log))
    assert Engine.objects.count() == 5
    run("engine", "add", "util-4b", "--kind", "llamacpp", "--url", "http://127.0.0.1:18044")
    assert Engine.objects.get(name="util-4b").retired_at is None and entry.engines.count() == 2


def test_export_imports_into_an_empty_database_and_exports_the_same_bytes(pair, tmp_path):
    apply_import(plan_import(FIXTURE.read_text()))
    apply_import(plan_import(OLD_ENGINES_LOG))
    exported = export_markdown()
    assert "Engines: driver-80b, util-4b" in exported and "Engines: nemotron, q38" in exported
    (tmp_path / "log.md").write_text(exported, encoding="utf-8")
    # A new box: its own SQLite database, migrated from nothing, no engines at all.
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(SPARKOPS_VAR_DIR=str(tmp_path / "var"), TIME_ZONE=settings.TIME_ZONE)
    manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]

    def sparkops(*args):
        done = subprocess.run([*manage, *args], env=env, capture_output=True, text=True, timeout=240, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    sparkops("migrate", "-v", "0")
    out = sparkops("changelog", "import", str(tmp_path / "log.md"))
    assert "imported: 5 new entries, 3 new correction(s)" in out and "nemotron" in out
    assert sparkops("changelog", "export") == exported
