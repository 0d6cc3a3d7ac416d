"""An install upgraded from today's schema keeps its data (issue 50, item 1): the layout may move
models between packages and apps, but `sparkops migrate` over a populated database of today must
keep every table under its name and every row in it.

A scratch database on the suite's own engine (a SQLite file, or a database beside the test one on
the PostgreSQL server) is migrated to today's leaf migrations and given a row in every table of
SparkOps' apps through that schema's historical models (tests/upgrade_db.py, in a process of its
own, as an install's `migrate` runs); then `sparkops migrate` runs over it as an upgrade would, and
the table list and every table's rows are counted again."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.upgrade_db import TODAY_TABLES

# Out of `make test-fast`: it migrates a database twice and counts it twice, each in a process of its own (10-20 s).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
# What `migrate` itself writes: its own record, and the content types and permissions of new models.
GROWN_BY_MIGRATE = {"django_migrations", "django_content_type", "auth_permission"}


def _run(env, *argv):
    out = subprocess.run(
        [sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.fixture
def scratch_url(tmp_path, django_db_blocker):
    """The URL of an empty database on the suite's engine, dropped afterwards."""
    from django.db import connection

    if connection.vendor == "sqlite":
        yield f"sqlite:///{tmp_path / 'upgrade.sqlite3'}"
        return
    s = connection.settings_dict
    name = f"{connection.creation._get_test_db_name()}_upgrade"[:63]
    with django_db_blocker.unblock(), connection._nodb_cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
        cursor.execute(f'CREATE DATABASE "{name}"')
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    yield f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{name}"
    with django_db_blocker.unblock(), connection._nodb_cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_an_install_upgraded_from_todays_schema_keeps_every_table_and_row(scratch_url, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SPARKOPS_TEST_DB_NAME")}
    env.update(DATABASE_URL=scratch_url, SPARKOPS_VAR_DIR=str(tmp_path / "var"))

    before = json.loads(_run(env, "-m", "tests.upgrade_db", "populate"))
    empty = [t for t in TODAY_TABLES.values() if not before["tables"].get(t)]
    assert not empty, f"today's schema was not populated: {empty}"

    _run(env, "-m", "sparkops.cli", "migrate", "--noinput", "-v0")
    after = json.loads(_run(env, "-m", "tests.upgrade_db", "census"))

    gone = sorted(set(before["tables"]) - set(after["tables"]))
    assert not gone, f"the upgrade dropped or renamed these tables: {gone}"
    lost = {
        t: (n, after["tables"][t])
        for t, n in before["tables"].items()
        if after["tables"][t] != n and not (t in GROWN_BY_MIGRATE and after["tables"][t] > n)
    }
    assert not lost, f"rows changed by the upgrade (before, after): {lost}"
    moved = {m: (t, after["db_tables"].get(m)) for m, t in TODAY_TABLES.items() if after["db_tables"].get(m) != t}
    assert not moved, (
        f"models whose table is not today's (today, now; None: no such model in SparkOps' apps): {moved}: "
        "keep db_table (or SeparateDatabaseAndState) when a model moves"
    )
