"""When the database cannot be written or reached: which of its states it is, and the one line
to tell the person or the checker, instead of a bare 500 (issue 31) or a wrong reason (issue 46:
with PostgreSQL stopped every page said "no database connection free").

`refusal(exc)` says whether EXC is the database refusing for a reason of its own and which:

- `down`: it cannot be reached (server stopped, refusing connections, gone mid-query; SQLite's
  file cannot be opened). The pool's "couldn't get a connection" is this too when the pool could
  not open the connections it lacked and a connection of our own is refused as well.
- `full`: its disk is full (SQLite "database or disk is full"; PostgreSQL "could not extend
  file", "No space left on device", SQLSTATE 53100).
- `read_only`: a read-only file or transaction (SQLite "attempt to write a readonly database";
  PostgreSQL SQLSTATE 25006, default_transaction_read_only or a hot standby).
- `pool_exhausted`: every connection of this process's pool is lent out and none came back in
  SPARKOPS_DB_POOL_TIMEOUT_S (or the server's own max_connections is reached).
- `slow`: a statement ran past its statement_timeout, or waited past a lock's timeout (SQLite
  "database is locked" after busy_timeout).

None for anything else (a bug stays a 500). `unavailable(exc)` is the same as one line. The root
URLconf's handler500 (`dashboard.views.errors.server_error`) answers those with 503, wherever the
error came from (a view, or a middleware: a session saved on the way out, a token's last use),
as a page, or JSON on /api/; /healthz names the state in its `database` key."""

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import InterfaceError, InternalError, OperationalError, connections

STATES = ("ok", "down", "full", "read_only", "pool_exhausted", "slow")
CONNECT_TIMEOUT_S = 1  # the connection of our own that tells a stopped server from a busy pool
# Less free than this beside the SQLite file is a full disk: SQLite reuses its WAL's space and
# goes on writing for minutes after the disk filled, then fails every write at once.
SQLITE_FREE_MIN_BYTES = 1 << 20

# What each state says, first words fixed (dashboard/dbgate.py and the tests match on them).
SAID = {
    "down": "the database cannot be reached: it is down or refusing connections",
    "full": "the database's disk is full: it cannot be written",
    "read_only": "the database is read-only: it cannot be written",
    "pool_exhausted": "no database connection free: every connection of the pool is in use",
    "slow": "the database did not answer in time: a query ran past its statement timeout",
    "locked": "the database is locked and did not answer in time",
}

# (SQLSTATEs, what the driver says in lower case) -> state; the first that matches.
KINDS: tuple[tuple[str, frozenset[str], tuple[str, ...]], ...] = (
    ("full", frozenset({"53100"}), ("disk is full", "disk full", "no space left", "could not extend file")),
    ("read_only", frozenset({"25006"}), ("readonly database", "read-only transaction", "read only", "read-only")),
    ("slow", frozenset(), ("statement timeout",)),
    ("locked", frozenset({"55P03"}), ("database is locked", "lock timeout")),
    ("pool_exhausted", frozenset({"53300"}), ("too many clients", "too many connections")),
    ("pool_timeout", frozenset(), ("couldn't get a connection",)),
)


@dataclass(frozen=True)
class Refusal:
    """The database's state (one of STATES but "ok"), what to say, and the driver's own words."""

    state: str
    said: str
    detail: str

    @property
    def line(self) -> str:
        return f"{self.said} ({self.detail})" if self.detail else self.said


def refusal(exc: BaseException | None) -> Refusal | None:
    """Which way the database refused, when EXC is the database refusing; else None."""
    if not isinstance(exc, (OperationalError, InterfaceError, InternalError)):
        return None
    kind = _kind(exc)
    if isinstance(exc, InternalError) and kind != "read_only":
        return None  # an InternalError other than a read-only transaction is a bug
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    if kind == "pool_timeout":
        return _pool_timeout()
    if kind == "locked":
        return Refusal("slow", SAID["locked"], text)
    if kind == "pool_exhausted":
        return Refusal(kind, "no database connection free: the server's max_connections is reached", text)
    if kind:
        return Refusal(kind, SAID[kind], text)
    state, detail = sqlite_file_state()  # "disk I/O error", "unable to open database file": why
    if state:
        return Refusal(state, SAID[state], f"{text}; {detail}")
    return Refusal("down", SAID["down"], text)


def unavailable(exc: BaseException | None) -> str | None:
    """One line saying why the database refused, when EXC is that; else None."""
    found = refusal(exc)
    return found.line if found else None


def _kind(exc: BaseException) -> str:
    codes = {getattr(e, "sqlstate", None) for e in (exc, exc.__cause__)} - {None}
    text = str(exc).lower()
    for kind, sqlstates, needles in KINDS:
        if codes & sqlstates or any(n in text for n in needles):
            return kind
    return ""


def _pool_timeout() -> Refusal:
    """The pool gave no connection in time: every connection lent out (exhausted), or it could
    not open the ones it lacked (the server is down). A connection of our own tells which: the
    pool's own count cannot (it counts the connections it keeps trying to open)."""
    why = server_unreachable()  # the pool's count includes the connections it keeps failing to open
    if why:
        return Refusal("down", SAID["down"], why)
    pool = settings.DATABASES["default"].get("OPTIONS", {}).get("pool", {})
    variable = getattr(settings, "SPARKOPS_DB_POOL_VARIABLE", "SPARKOPS_DB_POOL_MAX")  # a worker's is its own
    said = f"{SAID['pool_exhausted']} ({variable}={pool.get('max_size')}, none free within {pool.get('timeout'):g} s)"
    return Refusal("pool_exhausted", said, "")


def server_unreachable() -> str:
    """'' when a new connection of our own (outside the pool, CONNECT_TIMEOUT_S) opens and
    answers; else the driver's reason, one line. PostgreSQL only: SQLite has no server."""
    conn = connections["default"]
    if conn.vendor != "postgresql":
        return ""
    import psycopg

    params = conn.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.pop("prepare_threshold", None)
    try:
        with psycopg.connect(**params, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as own:
            own.execute("SELECT 1")
    except psycopg.Error as exc:
        if getattr(exc, "sqlstate", None) == "53300" or "too many clients" in str(exc):
            return ""  # up, at its max_connections: the pool's wait says the rest
        return str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    return ""


def sqlite_file_state() -> tuple[str, str]:
    """("full" or "read_only", what the file system says) when the SQLite file's file system is
    full (less than SQLITE_FREE_MIN_BYTES free) or cannot be written (mounted read-only, or the
    file or its directory not writable by us); ("", "") otherwise, and on PostgreSQL. SQLite
    says "disk I/O error" or "unable to open database file" for both when its -wal or -shm file
    cannot grow or be made, and reuses its WAL's space for minutes after the disk filled."""
    conn = connections["default"]
    name = str(conn.settings_dict["NAME"]) if conn.vendor == "sqlite" else ""
    if not name or name == ":memory:" or name.startswith("file:"):
        return "", ""
    path = Path(name).resolve()
    try:
        fs = os.statvfs(path.parent)
    except OSError:
        return "", ""
    if fs.f_flag & os.ST_RDONLY:
        return "read_only", f"{path.parent} is mounted read-only"
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return "read_only", f"{path} cannot be written by this process"
    free = fs.f_bavail * fs.f_frsize
    if free < SQLITE_FREE_MIN_BYTES:
        return "full", f"{free // 1024} KiB free on the file system of {path}"
    return "", ""


class DownVerdict:
    """This process's knowledge that the database server is down, so a page need not wait the
    pool's SPARKOPS_DB_POOL_TIMEOUT_S (10 s) to learn it again: set when a request found it
    down (`seen`), re-asked with a connection of our own at most every RECHECK_S while set,
    cleared when that connection opens. Nothing is asked while no outage is known."""

    RECHECK_S = 1.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._found: Refusal | None = None
        self._checked = float("-inf")

    def seen(self, found: Refusal) -> None:
        with self._lock:
            self._found, self._checked = found, time.monotonic()

    def now(self) -> Refusal | None:
        """The refusal to answer with, while the server is still down; None otherwise."""
        with self._lock:
            found = self._found
            if found is None or time.monotonic() - self._checked < self.RECHECK_S:
                return found
            self._checked = time.monotonic()  # one thread asks; the others answer as before
        why = server_unreachable()
        with self._lock:
            self._found = Refusal("down", SAID["down"], why) if why else None
            return self._found


DOWN = DownVerdict()
