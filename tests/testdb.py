"""Each pytest-xdist worker's test database, cloned from one migrated template instead of migrated
by every worker.

Migrating the test database (34 migrations, the change log's triggers) cost each worker about
2.4 s of a core in Python plus the server's share, all workers at once at the start of a run. Now
the first worker to take the run's lock creates and migrates a template (Django's
`setup_databases`, as pytest-django calls it, under another name), and every worker clones it
under the lock: PostgreSQL's `CREATE DATABASE … TEMPLATE` (what Django's own parallel test runner
does), SQLite's backup API.
The worker's database keeps the name pytest-django gave it (`…_gw0`) and is dropped as before; the
xdist controller drops the template when the run ends (`drop_template`, tests/xdist_env.py).

Django's test runner clones the same way (`BaseDatabaseCreation.clone_test_db`), but names the
clones itself (`…_1`) and only from a database the same process made; pytest-django has no
template option, so this glue is ours."""

from __future__ import annotations

import fcntl
import sqlite3
import tempfile
from contextlib import closing, contextmanager
from pathlib import Path

ALIAS = "default"


def template_name(test_name: str, testrunuid: str, worker: str | None = None) -> str:
    """The run's template, named from a worker's test database (`test_x_gw0`) or the controller's (`test_x`)."""
    if worker and test_name.endswith(f"_{worker}"):
        test_name = test_name[: -len(worker) - 1]
    return f"{test_name}_tpl{testrunuid[:8]}"


def _state(testrunuid: str, what: str) -> Path:
    """The run's file WHAT beside the template: `lock` (taken to make or clone it), `made` (its name)."""
    return Path(tempfile.gettempdir()) / f"sparkops-testdb-{testrunuid}.{what}"


@contextmanager
def _run_lock(testrunuid: str):
    with open(_state(testrunuid, "lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _close(connection) -> None:
    from dashboard.dbgate import PROBE

    connection.close()
    PROBE.close()  # the database gate's own session, kept between its checks
    if hasattr(connection, "close_pool"):
        connection.close_pool()  # PostgreSQL refuses a template that any session is connected to


def setup_worker_database(worker: str, testrunuid: str, verbosity: int):
    """Give this worker its test database, cloned from the run's template (made first if no worker
    has made it yet); return what `teardown_databases` takes."""
    from django.conf import settings
    from django.db import connections
    from django.test.utils import setup_databases

    connection = connections[ALIAS]
    creation = connection.creation
    target = creation._get_test_db_name()
    template = template_name(target, testrunuid, worker)
    original_name = connection.settings_dict["NAME"]
    test_settings = connection.settings_dict.setdefault("TEST", {})
    with _run_lock(testrunuid):
        made = _state(testrunuid, "made")
        if not made.exists():
            test_settings["NAME"] = template
            try:
                setup_databases(verbosity=verbosity, interactive=False, aliases={ALIAS})
            finally:
                test_settings["NAME"] = target
            _close(connection)
            made.write_text(template)
            connection.settings_dict["NAME"] = original_name
        _clone(connection, template, target)
    settings.DATABASES[ALIAS]["NAME"] = connection.settings_dict["NAME"] = target
    _close(connection)
    return [(connection, original_name, True)]


def _clone(connection, template: str, target: str) -> None:
    if connection.vendor == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            Path(target + suffix).unlink(missing_ok=True)
        # SQLite's backup API, not a file copy: it reads the template as a reader would, write-ahead log included.
        with closing(sqlite3.connect(template)) as source, closing(sqlite3.connect(target)) as copy:
            source.backup(copy)
        return
    quote = connection.ops.quote_name
    with connection.creation._nodb_cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {quote(target)}")
        cursor.execute(f"CREATE DATABASE {quote(target)} TEMPLATE {quote(template)}")


def teardown(db_cfg, verbosity: int) -> None:
    """Drop the test database, as pytest-django does. On PostgreSQL a connection some thread of the
    test process still holds (not the pool's: Django closes that first) made the DROP fail, and
    pytest-django only warns: every run left its workers' databases behind. The database is the
    test's own, so its remaining sessions are ended (`DROP DATABASE … WITH (FORCE)`, PostgreSQL 13+)."""
    from django.db import DatabaseError
    from django.test.utils import teardown_databases

    connection, original_name, _ = db_cfg[0]
    name = connection.settings_dict["NAME"]
    try:
        teardown_databases(db_cfg, verbosity=verbosity)
    except DatabaseError:
        if connection.vendor != "postgresql":
            raise
        _close(connection)
        with connection.creation._nodb_cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {connection.ops.quote_name(name)} WITH (FORCE)")
        connection.settings_dict["NAME"] = original_name
    if connection.vendor == "sqlite":  # Django removes the database file, not its log and index beside it
        for suffix in ("-wal", "-shm"):
            Path(name + suffix).unlink(missing_ok=True)


def template_made(testrunuid: str) -> bool:
    return _state(testrunuid, "made").exists()


def drop_template(testrunuid: str) -> None:
    """The controller's end of the run: drop the template a worker made, if one did."""
    made = _state(testrunuid, "made")
    if not made.exists():
        return
    template = made.read_text()
    from django.db import connections

    connection = connections[ALIAS]
    try:
        if connection.vendor == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                Path(template + suffix).unlink(missing_ok=True)
        else:
            with connection.creation._nodb_cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS {connection.ops.quote_name(template)}")
    finally:
        for path in (made, _state(testrunuid, "lock")):
            path.unlink(missing_ok=True)
        _close(connection)
