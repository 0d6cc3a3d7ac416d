"""One clock for what several processes compare: the database's.

A worker, the web and beat may run on machines (or under libfaketime) whose clocks disagree.
A time one process writes and another compares with its own "now" — a host's
`last_report_at` against the collector-stale limit, a delivery's `next_attempt_at`, an
alert's `started_at` against its resolution — is read from the database (`db_now()`), or
written as `Now()` in the statement, never taken from the writer's clock.

Each worker measures how far its own clock is from the database's when it stores its report
(`offset_s()`); the host's reading carries it (`Host.latest["clock_offset_s"]`), /healthz
lists a host off by more than SPARKOPS_CLOCK_SKEW_MAX_S, and the `clock_skew` host rule
fires for it."""

import time
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connections
from django.utils import timezone


def db_now(using: str = "default") -> datetime:
    """The database server's time now (an aware UTC datetime). PostgreSQL: clock_timestamp().
    SQLite has no server: every process of the stack runs on its one box, and SQLite's "now"
    is that box's clock as the process reads it (time.time, at full precision here: SQLite's
    own has milliseconds only)."""
    conn = connections[using]
    if conn.vendor == "postgresql":
        with conn.cursor() as cursor:
            cursor.execute("SELECT clock_timestamp()")
            (value,) = cursor.fetchone()
        return value.astimezone(UTC)
    return datetime.fromtimestamp(time.time(), UTC)


def offset_s(using: str = "default") -> float:
    """How far this process's clock (timezone.now) is ahead of the database's, in seconds
    (negative: behind), measured around one query: the midpoint of the two local readings."""
    before = timezone.now()
    server = db_now(using)
    after = timezone.now()
    local = before + (after - before) / 2
    global _measured_offset_s  # noqa: PLW0603 (the process's one measurement)
    _measured_offset_s = (local - server).total_seconds()
    return round(_measured_offset_s, 3)


_measured_offset_s = 0.0  # this process's clock minus the database's, as offset_s() last measured it


def shared_now() -> datetime:
    """The database's time without a query: this process's clock less the offset it last
    measured (a worker measures at each store of its report, every SPARKOPS_FLUSH_INTERVAL;
    a process that never measured reads its own clock). For hot paths, e.g. how long a
    pending alert (its started_at the database's) has waited."""
    return timezone.now() - timedelta(seconds=_measured_offset_s)


def to_shared(moment):
    """MOMENT, read from this process's clock, on the database's clock (less the offset last
    measured): e.g. when a reading was taken, written later as an alert's start."""
    return moment - timedelta(seconds=_measured_offset_s)


def skew_limit_s() -> float:
    return float(settings.SPARKOPS_CLOCK_SKEW_MAX_S)


def skew_text(name: str, offset: float | None) -> str:
    """What to say about a clock OFFSET seconds off the database's; "" when within the limit."""
    if offset is None or abs(offset) <= skew_limit_s():
        return ""
    way = "ahead of" if offset > 0 else "behind"
    return (
        f"the clock of {name} is {abs(offset):.1f} s {way} the database's "
        f"(more than SPARKOPS_CLOCK_SKEW_MAX_S={skew_limit_s():g}): set up NTP (timedatectl set-ntp true)"
    )


def report_lag_s() -> float:
    """How far behind a live worker's stored report (Host.last_report_at) may be: its resident
    poller stores every SPARKOPS_FLUSH_INTERVAL. Whoever judges a worker dead from it allows this much."""
    return max(settings.SPARKOPS_FLUSH_INTERVAL, settings.SPARKOPS_POLL_INTERVAL)


def report_limit(intervals: float) -> timedelta:
    """How long a box's worker may go without storing its report before the box is unreachable:
    INTERVALS poll intervals (collector_stale's setting) plus the store interval it reports at."""
    return timedelta(seconds=settings.SPARKOPS_POLL_INTERVAL * intervals + report_lag_s())


def report_overdue(reported: datetime, *, now: datetime, limit: timedelta, back: datetime | None) -> bool:
    """Whether a box whose worker last reported at REPORTED is unreachable at NOW (both on the
    database's clock): counted from the database's return BACK when later, since no box could
    report while it was away. collector_stale pages by it and `poller.fleet.box_reachable` refuses
    a box's controls by it: one judgement."""
    since = reported if back is None else max(reported, back)
    return now - since > limit
