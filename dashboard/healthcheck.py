"""The stack's health as one judgement (`health_report`): the database answers and can be
written, Redis answers, the workers poll and report, their clocks agree. /healthz
(views/health.py) serves it and the heartbeat duty (heartbeat.py) sends its verdict outside; it
sits below both, since the heartbeat runs in a worker, which has no business importing the pages."""

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import redis
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Max

from dashboard.clock import db_now, report_lag_s, skew_text
from dashboard.dbfail import DOWN, SAID, Refusal, refusal, server_unreachable, sqlite_file_state
from dashboard.models import Engine, Host
from dashboard.samples.store import states_put

STALE_AFTER_INTERVALS = 3
WRITE_CHECK_KEY = "healthz:write"  # the CollectorState row the write check upserts


def _check_database() -> tuple[str, str]:
    """(state, one line): "ok" or a dbfail state. A stopped PostgreSQL is known from a
    connection of our own in milliseconds, not after the pool's wait. The write check is one
    committed row, and on PostgreSQL one new block (a temporary table's first row): an upsert of
    the same row fits its page on a full disk, and /healthz said "ok" (issue 46); SQLite's file
    system is asked whether it is full or read-only (dbfail.sqlite_file_state), the same reason:
    its WAL's space is reused, and a read-only file fails with "unable to open"."""
    why = server_unreachable()
    if why:
        DOWN.seen(Refusal("down", SAID["down"], why))  # the pages need not wait the pool to learn it
        return "down", f"{SAID['down']} ({why})"
    state, detail = sqlite_file_state()
    if state:
        return state, f"cannot be written: {SAID[state]} ({detail})"
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        return _refused(exc, "")
    try:
        with transaction.atomic():
            states_put({WRITE_CHECK_KEY: {}})
            _one_new_block()
    except DatabaseError as exc:
        return _refused(exc, "cannot be written: ")
    state, detail = sqlite_file_state()  # filled or switched while we wrote
    if state:
        return state, f"cannot be written: {SAID[state]} ({detail})"
    return "ok", ""


def _refused(exc: DatabaseError, prefix: str) -> tuple[str, str]:
    found = refusal(exc)
    if found is None:
        return "error", f"{prefix}{exc}"
    return found.state, f"{prefix}{found.line}"


def _one_new_block() -> None:
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE sparkops_healthz_write (x integer) ON COMMIT DROP")
        cursor.execute("INSERT INTO sparkops_healthz_write VALUES (1)")
        cursor.execute("DROP TABLE sparkops_healthz_write")  # inside an outer transaction too


def _check_redis() -> None:

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=1, socket_connect_timeout=1)
    try:
        client.ping()
    finally:
        client.close()


def _latest_poll() -> datetime | None:
    engine_poll = Engine.objects.aggregate(t=Max("last_poll_at"))["t"]
    host_poll = Host.objects.aggregate(t=Max("last_report_at"))["t"]
    times = [t for t in (engine_poll, host_poll) if t]
    return max(times) if times else None


def _stale_hosts(limit: timedelta, now: datetime) -> Iterator[str]:
    """Hosts whose own worker has not reported within LIMIT (the collector-stale condition), and
    live ones whose clock is off the database's (what they measured when they last stored)."""
    for name, reported, latest in Host.objects.values_list("name", "last_report_at", "latest"):
        if reported is None:
            yield f"host {name}: its worker has never reported"
        elif now - reported > limit:
            yield f"host {name}: its worker has not reported for {int((now - reported).total_seconds())} s"
        else:
            skew = skew_text(f"host {name}", latest.get("clock_offset_s") if isinstance(latest, dict) else None)
            if skew:
                yield f"clock: {skew}"


def health_report() -> dict[str, Any]:
    """What /healthz says, as a dict with the same keys whatever the state: `status` "ok" or
    "unhealthy", `message` (one line for a person), `database` (dbfail.STATES, or "error" for a
    failure it does not know), `redis` ("ok" or "error"), `latest_poll`, `problems` (each check's
    line). The heartbeat (dashboard/heartbeat.py) sends its verdict outside."""
    problems: list[str] = []
    state, line = _check_database()
    if state != "ok":
        problems.append(f"database: {line}")
    redis_state = "ok"
    try:
        _check_redis()
    except Exception as exc:  # any failure is the answer, not a crash
        redis_state = "error"
        problems.append(f"redis: {exc}")
    latest = None
    if state in READABLE:
        try:
            latest = _poll_problems(problems)
        except DatabaseError as exc:  # the database went while we read
            state, line = _refused(exc, "")
            problems.append(f"database: {line}")
    return {
        "status": "ok" if not problems else "unhealthy",
        "message": _message(state, line, problems),
        "database": state,
        "redis": redis_state,
        "latest_poll": latest.isoformat() if latest else None,
        "problems": problems,
    }


def _poll_problems(problems: list[str]) -> datetime | None:
    """The latest poll's time; PROBLEMS gets what is stale (the workers, a clock off)."""
    latest = _latest_poll()
    limit = timedelta(seconds=settings.SPARKOPS_POLL_INTERVAL * STALE_AFTER_INTERVALS + report_lag_s())
    now = db_now()  # the workers' reports are stamped with the database's clock
    if latest is None:
        problems.append("poll: no poll has completed yet")
    elif now - latest > limit:
        problems.append(f"poll: the latest poll is {int((now - latest).total_seconds())} s old")
    problems.extend(_stale_hosts(limit, now))
    return latest


def _message(state: str, line: str, problems: list[str]) -> str:
    if state != "ok":
        return MESSAGES[state].format(line)
    return "; ".join(problems) if problems else "All checks pass: the database answers and can be written."


# The states in which the database still answers reads: the polls and hosts are judged too.
READABLE = ("ok", "full", "read_only")
# The `message` of each state: the first problem, said for a person ({} is the database's line).
MESSAGES = {
    "down": "The database is down: {}",
    "full": "The database cannot be written: its disk is full. {}",
    "read_only": "The database cannot be written: it is read-only. {}",
    "pool_exhausted": "Every database connection is in use: {}",
    "slow": "The database is too slow: {}",
    "error": "The database failed: {}",
}
