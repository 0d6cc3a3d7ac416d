"""`sparkops backup FILE` and the README's restore, tried as written: back up a SQLite install
with a change log, restore the file into an empty install, and the change-log export is the
same, byte for byte. PostgreSQL installs are told the pg_dump command instead."""

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("test_backup")  # its module-scoped fixture is built once a run, on one worker

LOG = Path(__file__).parent / "fixtures" / "changelog" / "spark-config-log.md"


def sparkops(var_dir, *args, check=True, **env):
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SPARKOPS_TEST_DB_NAME")}
    base.update(SPARKOPS_VAR_DIR=str(var_dir), **env)
    out = subprocess.run(
        [sys.executable, "-m", "sparkops.cli", *args],
        env=base,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if check:
        assert out.returncode == 0, out.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def install(tmp_path_factory):
    """A SQLite install with the field log (entries and their corrections) imported."""
    var = tmp_path_factory.mktemp("install") / "var"
    sparkops(var, "migrate", "--noinput", "-v0")
    sparkops(var, "changelog", "import", str(LOG))
    return var


def _exports(var):
    return (
        sparkops(var, "changelog", "export", "--format", "md").stdout.encode(),
        sparkops(var, "changelog", "export", "--format", "json").stdout.encode(),
    )


def test_backup_restores_into_an_empty_install_with_the_same_change_log(install, tmp_path):
    before_md, before_json = _exports(install)
    assert before_md.count(b"\n## ") >= 2 and b"Correction" in before_md  # a real log, corrections included

    # Online: a reader holding the database open (as the running stack does) does not stop it,
    # and what is still in the write-ahead log is in the copy.
    holder = sqlite3.connect(install / "sparkops.sqlite3")
    holder.execute("BEGIN")
    holder.execute("SELECT count(*) FROM django_migrations").fetchone()
    try:
        backup = tmp_path / "sparkops-backup.sqlite3"
        out = sparkops(install, "backup", str(backup))
    finally:
        holder.rollback()
        holder.close()
    assert f"to {backup}:" in out.stdout and backup.stat().st_mode & 0o777 == 0o600
    assert not list(tmp_path.glob(".*partial*"))

    # The README's restore, step by step, into an empty install (a state directory of its own
    # that has never held a database, as on a new box).
    empty = tmp_path / "empty-var"
    empty.mkdir()
    db = empty / "sparkops.sqlite3"
    for leftover in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        leftover.unlink(missing_ok=True)
    shutil.copy2(backup, db)
    sparkops(empty, "migrate", "--noinput", "-v0")

    assert _exports(empty) == (before_md, before_json)


def test_backup_refuses_an_existing_file_or_missing_directory(install, tmp_path):
    existing = tmp_path / "keep.sqlite3"
    existing.write_bytes(b"precious")
    out = sparkops(install, "backup", str(existing), check=False)
    assert out.returncode == 1 and "exists; name a new file" in out.stderr
    assert existing.read_bytes() == b"precious"
    out = sparkops(install, "backup", str(tmp_path / "no" / "such" / "dir.sqlite3"), check=False)
    assert out.returncode == 1 and "is not a directory" in out.stderr
    assert list(tmp_path.iterdir()) == [existing]


def test_backup_on_postgresql_prints_the_pg_dump_command(tmp_path):
    target = tmp_path / "ops backup.dump"
    out = sparkops(
        tmp_path / "var",
        "backup",
        str(target),
        check=False,
        DATABASE_URL="postgres://ops:s3cret@db.example:5433/sparkops",
    )
    assert out.returncode == 1
    assert (
        f"  pg_dump --format=custom '--file={target}' --host=db.example --port=5433 --username=ops sparkops\n"
        in out.stderr
    )
    assert (
        f"pg_restore --no-owner --host=db.example --port=5433 --username=ops --dbname=sparkops '{target}'" in out.stderr
    )
    assert "PGPASSWORD" in out.stderr and "s3cret" not in out.stderr + out.stdout
    assert not target.exists()
