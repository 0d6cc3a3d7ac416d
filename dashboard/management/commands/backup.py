"""`sparkops backup FILE`: a consistent copy of the SQLite database while SparkOps runs, through
SQLite's online backup API (sqlite3.Connection.backup: page by page, writers go on meanwhile,
and the copy is one moment's state). On PostgreSQL it refuses and prints the pg_dump command
for DATABASE_URL. Restore: docs/install.md, "Backup and restore"."""

import os
import shlex
import sqlite3
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from dashboard.management.base import CliCommand


class Command(CliCommand):
    help = "Back up the SQLite database to FILE while SparkOps runs (PostgreSQL: prints the pg_dump command)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("file", help="the backup file to create (must not exist)")

    def handle(self, *args: Any, file, **opts: Any):
        db = settings.DATABASES["default"]
        if db["ENGINE"] != "django.db.backends.sqlite3":
            raise CommandError(_not_sqlite(db, file))
        source = Path(db["NAME"])
        target = Path(file).expanduser()
        if not source.is_file():
            raise CommandError(f"no database at {source} to back up")
        if target.exists():
            raise CommandError(f"{target} exists; name a new file (nothing written)")
        if not target.parent.is_dir():
            raise CommandError(f"{target.parent} is not a directory (nothing written)")
        if target.resolve() == source.resolve():
            raise CommandError("the backup file is the database itself")
        partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
        try:
            pages = _copy(source, partial)
            os.replace(partial, target)  # FILE appears whole or not at all
        except (sqlite3.Error, OSError) as exc:
            partial.unlink(missing_ok=True)
            raise CommandError(f"backup failed: {exc} (nothing written)") from None
        size = target.stat().st_size
        self.stdout.write(f"backed up {source} to {target}: {size:,} bytes, {pages:,} pages")


def _copy(source, target):
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=20)
    try:
        dst = sqlite3.connect(target)
        try:
            # Steps of 1024 pages let writers in between; a write by another connection makes
            # SQLite restart the copy, so what lands is one consistent moment.
            src.backup(dst, pages=1024)
            # One self-contained file (no -wal beside it), checked before it is named FILE.
            dst.execute("PRAGMA journal_mode=DELETE")
            (verdict,) = dst.execute("PRAGMA integrity_check").fetchone()
            if verdict != "ok":
                raise sqlite3.DatabaseError(f"the copy fails its integrity check: {verdict}")
            (pages,) = dst.execute("PRAGMA page_count").fetchone()
        finally:
            dst.close()
    finally:
        src.close()
    os.chmod(target, 0o600)  # it holds password hashes and the channels' secrets
    return pages


def _not_sqlite(db, file) -> str:
    if db["ENGINE"] != "django.db.backends.postgresql":
        return (
            f"sparkops backup copies SQLite databases only; this install uses {db['ENGINE']}: "
            "use that database's own backup tool"
        )
    conn = [
        f"--{flag}={db[key]}" for flag, key in (("host", "HOST"), ("port", "PORT"), ("username", "USER")) if db.get(key)
    ]
    dump = shlex.join(["pg_dump", "--format=custom", f"--file={file}", *conn, db["NAME"]])
    restore = shlex.join(["pg_restore", "--no-owner", *conn, f"--dbname={db['NAME']}", file])
    password = (
        " (the password is the one in DATABASE_URL: give it as PGPASSWORD or in ~/.pgpass)"
        if db.get("PASSWORD")
        else ""
    )
    return (
        f"this install's database is PostgreSQL, and sparkops backup copies SQLite only; use pg_dump{password}:\n"
        f"  {dump}\n"
        f"and restore into an empty database with:\n"
        f"  {restore}"
    )
