"""Whether this process's database is away, known without waiting on it.

With PostgreSQL stopped, every query of a worker waited SPARKOPS_DB_POOL_TIMEOUT_S (10 s) for a
pooled connection that could not be made, then failed: a death seen then was paged 24 s late,
and the metrics thread, blocked in those waits, read nothing for the outage (issue 46). So the
paths that must go on without the database (the page path, the poller's store, its alert
memory) ask `GATE.away()` first. The verdict comes from the last failure this process saw
(`failed`), re-checked at most every CHECK_EVERY_S with a connection of its own, outside the
pool and with a 1 s connect timeout (PostgreSQL), so a stopped server is known in milliseconds.

A database that answers but cannot be written (read-only, disk full: both vendors refuse such a
write at once) is tried as usual: `outage()` says an outage is on from its first refused write
until a write goes through (`reachable`), and the page path uses the spool meanwhile.

One gate per process, as the connection pool is: whatever a thread learns, the others use.
Every query of this process that goes through is such a lesson (`_answered`, an execute wrapper
on each connection): while the process talks to its database, no check opens a connection of
its own (the worker's probe and upkeep asked every second and opened one about every other
second: 6 % of its CPU in the poll-overhead bench).

The check's connection is kept (`_Probe`) and asked `SELECT 1` the next time: a new connection
cost 0.97 ms of CPU per check, a query over a kept one 0.08 ms (11 % of the worker's CPU in the
bench, under load, were these checks). The kept connection only ever proves the server answers:
when it fails, a new one is tried before the server is called away (it was restarted, or ended
the session), unless the failure was a timeout (TCP_USER_TIMEOUT 1 s: a partition), which a new
connection would only wait out again. While no kept connection stands (the server was away, or
refused a new session: "too many clients"), each check is a new connection, as before."""

import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.db import DatabaseError, connection
from django.db.backends.signals import connection_created

from dashboard import dbfail

log = logging.getLogger(__name__)
CHECK_EVERY_S = 1.0  # a verdict older than this is checked again before it is used
# A check this recent is "now" even for a caller about to borrow a connection (max_age 0): the
# reads that one evaluation finds due share one check rather than open a connection each.
JUST_CHECKED_S = 0.1
CONNECT_TIMEOUT_S = 1
# The failures a retry waits for (the pool's timeout): a full disk or a read-only database
# refuses at once, so a write is simply tried again.
WAITING = ("the database cannot be reached", "no database connection free")


class DatabaseGate:
    """The verdict: away since when and why (None: reachable as far as this process knows)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._checking = threading.Lock()
        self.away_since: float | None = None  # epoch s of the first failure of this outage
        self.why = ""
        self.back_at: datetime | None = None  # this process's clock, when it last saw the database return
        self.checked_at = float("-inf")  # monotonic s of the last verdict
        self._skip = False  # the last verdict: leave the database alone

    def away(self, max_age: float = CHECK_EVERY_S) -> bool:
        """Whether to leave the database alone now: the last verdict while fresh, else checked
        again (PostgreSQL: a connection of its own opens and answers, in milliseconds; SQLite,
        which has no server to be down, is tried by the next write). A database that answers
        is tried again even during an outage: the write that goes through ends it (`reachable`).
        MAX_AGE 0: checked now (or JUST_CHECKED_S ago), for a caller about to borrow a connection
        (a store, a read that is due), so a server stopped a moment ago costs no pool wait;
        float("inf"): the verdict as last known, for a caller that reads nothing."""
        fresh = max(max_age, JUST_CHECKED_S)
        with self._lock:
            if time.monotonic() - self.checked_at < fresh:
                return self._skip
        with self._checking:  # one check at a time: a thread that waited for one uses its verdict
            with self._lock:
                if time.monotonic() - self.checked_at < fresh:
                    return self._skip
            why = _pg_unreachable() if connection.vendor == "postgresql" else ""
            if why:
                self._mark(why)
            with self._lock:
                self._skip, self.checked_at = bool(why), time.monotonic()
                return self._skip

    def outage(self) -> bool:
        """Whether an outage is in progress (a failure seen, no write through since): the page
        path then sends from the spool rather than wait on the database."""
        return self.away_since is not None or self.away()

    def failed(self, exc: BaseException) -> bool:
        """Record EXC when it is the database refusing (dbfail.unavailable); whether it was."""
        why = dbfail.unavailable(exc) if isinstance(exc, DatabaseError) else None
        if why is None:
            return False
        self._mark(why)
        if why.startswith(WAITING):  # the next try would wait as long: leave it until checked again
            with self._lock:
                self._skip, self.checked_at = True, time.monotonic()
        return True

    def answered(self) -> None:
        """This process's own queries just went through: as good a verdict as a check made now,
        so the callers that ask next (within their max_age) open no connection to check."""
        with self._lock:
            self._skip, self.checked_at = False, time.monotonic()

    def reachable(self) -> None:
        """A write went through (or the check found the server answering): the outage is over."""
        self.answered()
        with self._lock:
            if self.away_since is None:
                return
            log.warning("the database is back after %.1f s (%s)", time.time() - self.away_since, self.why)
            self.away_since, self.why, self.back_at = None, "", datetime.now(UTC)
            self._skip = False

    def state(self) -> dict:
        """For /healthz and the logs: {"away": bool, "since": epoch s or None, "why": str}."""
        return {"away": self.away_since is not None, "since": self.away_since, "why": self.why}

    def _mark(self, why: str) -> None:
        with self._lock:
            if self.away_since is None:
                log.warning("the database is away: %s", why)
                self.away_since = time.time()
            self.why = why


class _Probe:
    """The gate's own connection (PostgreSQL), kept between checks; one check at a time."""

    TIMED_OUT_S = 0.5  # a kept connection's failure this slow was a timeout, not a closed session

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: Any = None
        self._key: tuple = ()

    def unreachable(self) -> str:
        """'' when the server answers (over the kept connection, else a new one), else why not."""
        import psycopg

        conf = connection.settings_dict
        key = tuple(conf.get(k) or None for k in ("NAME", "HOST", "PORT", "USER", "PASSWORD"))
        with self._lock:
            if self._conn is not None and self._key == key:
                began = time.monotonic()
                try:
                    _select_1(self._conn.pgconn)
                    return ""
                except (psycopg.Error, OSError) as exc:
                    self._drop()
                    if time.monotonic() - began >= self.TIMED_OUT_S:
                        return _why(exc)
            self._drop()
            try:
                self._conn = psycopg.connect(
                    dbname=key[0],
                    host=key[1],
                    port=key[2],
                    user=key[3],
                    password=key[4],
                    connect_timeout=CONNECT_TIMEOUT_S,
                    # A query unanswered this long ends the session (a partition): the check's 1 s.
                    tcp_user_timeout=CONNECT_TIMEOUT_S * 1000,
                    application_name="sparkops-dbgate",
                    autocommit=True,
                )
                self._key = key
                _select_1(self._conn.pgconn)
            except (psycopg.Error, OSError) as exc:
                self._drop()
                return _why(exc)
            return ""

    def close(self) -> None:
        """Close the kept connection (a test about to drop or clone its database)."""
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()


def _select_1(pgconn: Any) -> None:
    """SELECT 1 over PGCONN (libpq's, through psycopg.pq), answered within CONNECT_TIMEOUT_S or
    TimeoutError: a server that takes the bytes and never answers (stopped, or hung) must not hold
    the check, and the page path behind it, for longer than a new connection's timeout would."""
    from psycopg import OperationalError, pq

    pgconn.send_query(b"SELECT 1")
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        pgconn.consume_input()
        if not pgconn.is_busy():
            break
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([pgconn.socket], [], [], left)[0]:
            raise TimeoutError(f"no answer to SELECT 1 within {CONNECT_TIMEOUT_S} s")
    while (result := pgconn.get_result()) is not None:
        if result.status != pq.ExecStatus.TUPLES_OK:
            raise OperationalError(pgconn.error_message.decode(errors="replace").strip() or "SELECT 1 failed")


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"the database cannot be reached ({text[:200]})"


PROBE = _Probe()
# A forked child keeps its parent's session object, unclosed: closing it would end the parent's.
_FORKED_AWAY: list[Any] = []


def _after_fork_in_child() -> None:
    if PROBE._conn is not None:
        _FORKED_AWAY.append(PROBE._conn)
        PROBE._conn = None
    PROBE._lock, GATE._checking = threading.Lock(), threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _pg_unreachable() -> str:
    """'' when the database's server answers the gate's own connection, else why not (one line)."""
    return PROBE.unreachable()


def database_back_at() -> datetime | None:
    """When the database last came back from an outage, by its own clock, as far as this
    process can tell: PostgreSQL's start (a server stopped and started again), or the end of
    an outage this process saw (a full disk, a read-only spell). None: never away. Whoever judges
    a box by its last report counts from here: a box that could not report was not dead."""
    from dashboard.clock import to_shared

    back = [to_shared(GATE.back_at)] if GATE.back_at is not None else []
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_postmaster_start_time()")
            back.append(cursor.fetchone()[0].astimezone(UTC))
    return max(back) if back else None


GATE = DatabaseGate()


def _answered(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
    """A query went through: the database answered now (a failure raises past this)."""
    result = execute(sql, params, many, context)
    GATE.answered()
    return result


def _wrap(**kwargs: Any) -> None:
    wrappers = kwargs["connection"].execute_wrappers
    if _answered not in wrappers:  # a pooled connection is "created" at every checkout
        wrappers.insert(0, _answered)  # outermost: a wrapper that refuses (a test's) raises past it


connection_created.connect(_wrap, dispatch_uid="dashboard.dbgate.answered")
