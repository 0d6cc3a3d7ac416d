"""A real database that refuses: another connection holds a lock this process's statements
cannot get, and they give up after a short wait, as they would against a database that is
locked, full or gone (issue 31, items 4 and 6). No mock: the refusal is the driver's own error.

- SQLite: a second connection holds the file's write lock (BEGIN EXCLUSIVE; in WAL mode readers
  go on) and this process's connection waits `busy_timeout` ms for it, then "database is locked".
- PostgreSQL: a second connection holds TABLES in ACCESS EXCLUSIVE mode (no read, no write) and
  this process's session gives up after `lock_timeout`. Only the test's own database and this
  session's setting are touched, and put back."""

import sqlite3
from contextlib import contextmanager

from django.db import connection

WAIT_MS = 150


@contextmanager
def refusing(*tables):
    """While inside, this process's (Django default connection's) writes fail: on SQLite every
    write, on PostgreSQL every statement on TABLES (model classes or table names)."""
    names = [t if isinstance(t, str) else t._meta.db_table for t in tables]
    connection.ensure_connection()
    if connection.vendor == "sqlite":
        other = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None, timeout=5)
        other.execute("BEGIN EXCLUSIVE")
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout")
            (before,) = cursor.fetchone()
            cursor.execute(f"PRAGMA busy_timeout = {WAIT_MS}")
        try:
            yield
        finally:
            other.execute("ROLLBACK")
            other.close()
            with connection.cursor() as cursor:
                cursor.execute(f"PRAGMA busy_timeout = {int(before)}")
        return
    import psycopg

    params = connection.get_connection_params()
    other = psycopg.connect(
        dbname=connection.settings_dict["NAME"],
        host=params.get("host"),
        port=params.get("port"),
        user=params.get("user"),
        password=params.get("password"),
    )
    try:
        with other.cursor() as cursor:
            for name in names:
                cursor.execute(f"LOCK TABLE {connection.ops.quote_name(name)} IN ACCESS EXCLUSIVE MODE")
        with connection.cursor() as cursor:
            cursor.execute(f"SET lock_timeout = '{WAIT_MS}ms'")
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET lock_timeout")
    finally:
        other.rollback()
        other.close()


@contextmanager
def read_only():
    """While inside, the database refuses every write and answers reads: what a full disk or a
    database switched to read-only does to SparkOps. SQLite: PRAGMA query_only on this
    process's connection ("attempt to write a readonly database"). PostgreSQL: the test
    database's default_transaction_read_only ("cannot execute INSERT in a read-only
    transaction") for every new session, and the pool emptied so each connection it hands out
    is one (a login gives its connection back mid-request: a setting of one session would be
    left behind). Real refusals by the database itself, deterministic: no timing involved."""
    connection.ensure_connection()
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA query_only = ON")
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA query_only = OFF")
        return
    name = connection.ops.quote_name(connection.settings_dict["NAME"])
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
    _new_pool()
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET default_transaction_read_only = off")
            cursor.execute(f"ALTER DATABASE {name} RESET default_transaction_read_only")
        _new_pool()


def _new_pool():
    """Close this process's pooled connections (Django makes a new pool at the next query)."""
    connection.close()
    if getattr(connection, "pool", None) is not None:
        connection.close_pool()
