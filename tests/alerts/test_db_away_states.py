"""A death is paged while the database is full or out of connections, and the readings held
meanwhile are written after (issue 46, items 1-2; tests/test_db_states.py checks what the pages
say in the same states, tests/alerts/test_db_away.py the read-only case).

The armed poller of tests/alerts/test_exit_watch.py (a real engine process watched through a
pidfd, a real webhook receiver on 127.0.0.1), its database moved for the test to one that can
be taken away for real:

- SQLite: a copy of the test database (VACUUM INTO) on a tmpfs of its own (root), filled to the
  last byte after a WAL checkpoint, so the next write fails with "database or disk is full";
- PostgreSQL: a private server (tests/privatepg.py) with the test database's schema, every one
  of its max_connections taken by the test and the sessions it had ended, so the worker's pool
  can open no connection and the server refuses each new one ("too many clients already").

The engine dies inside; the page goes out from the spool, once; the poller ticks on by hand,
holding its readings; when the space or the slots return, the first store writes the held
readings (each tick's, none lost: the series' widest gap is the ticks' own spacing) and the
alert with the time the death was seen. Every wait is on an event."""

import os
import shutil
import signal
import sqlite3
import time
from contextlib import contextmanager
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from dashboard.dbgate import GATE
from dashboard.models import Engine, Sample, Series
from sparkops.alerts.models import AlertEvent, Delivery
from sparkops.live.presence import sockets
from sparkops.poller import exitwatch
from tests.alerts.test_db_away import _close_all, _steady, firing_pages, spool_here  # noqa: F401 (fixture)
from tests.alerts.test_exit_watch import armed, eager, engine_proc  # noqa: F401 (fixtures)
from tests.privatepg import PrivatePostgres, _bin, reachable_dir
from tests.test_db_states import _fill, _small_fs
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not exitwatch.pidfd_supported(), reason="no pidfds on this kernel"),
]
IS_ROOT = os.geteuid() == 0
SLOTS = 20  # the private server's max_connections: few to take
TICKS = 3  # metrics ticks while the database is away
SLACK_S = 0.25  # a reading's stamp is on the database's clock (tests: the same machine's)


@contextmanager
def _database_at(**where):
    """Every connection this process opens while inside (any thread's, pooled or not) goes to
    WHERE (keys of Django's settings for the database); the ones open now are closed first, and
    the ones opened inside when it ends."""
    conf = connection.settings_dict  # the one dict every thread's connection is made from
    saved = {key: conf.get(key) for key in where}
    _close_all()
    conf.update(where)
    try:
        yield
    finally:
        _close_all()
        conf.update(saved)


# SQLite on a full tmpfs ------------------------------------------------------------------------


@pytest.fixture
def sqlite_on_tmpfs():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite on a full disk: this run's database is PostgreSQL (the SQLite run has it)")
    if not IS_ROOT:
        pytest.skip("a full disk needs a tmpfs of its own (root)")
    with _small_fs("24m") as fs:
        db = fs / "sparkops.sqlite3"
        with connection.cursor() as cursor:
            cursor.execute("VACUUM INTO %s", [str(db)])
        with _database_at(NAME=str(db)):
            yield fs, db


@pytest.fixture
def armed_on_tmpfs(sqlite_on_tmpfs, armed):  # in this order: the armed rows go to the tmpfs
    return sqlite_on_tmpfs, armed


@contextmanager
def _disk_full(fs, db):
    """The tmpfs filled after the WAL is emptied: the next write must grow a file, and cannot."""
    with sqlite3.connect(db, timeout=20) as own:
        assert wait_for(lambda: own.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0, timeout=30)
    own.close()
    filler = _fill(fs)
    try:
        yield
    finally:
        filler.unlink()


def test_a_death_is_paged_while_sqlites_disk_is_full_and_the_readings_are_written_after(
    armed_on_tmpfs, eager, receiver, spool_here
):
    (fs, db), armed = armed_on_tmpfs
    assert connection.settings_dict["NAME"] == str(db)
    _death_while_away(armed, receiver, spool_here, lambda: _disk_full(fs, db), says="disk is full")


# PostgreSQL with every connection taken --------------------------------------------------------


@pytest.fixture
def private_pg():
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL out of connections: this run's database is SQLite (the PostgreSQL run has it)")
    try:
        _bin("initdb")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    root = reachable_dir("sparkops-pgslots-")
    pg = PrivatePostgres(root / "pg").init()
    try:
        pg.start()
        pg.sql(f"ALTER SYSTEM SET max_connections = {SLOTS}", dbname="postgres")
        pg.stop()
        pg.start()
        pg.create_database()
        pg.load_schema_from(connection.settings_dict)
        where = {"HOST": "127.0.0.1", "PORT": str(pg.port), "NAME": pg.dbname, "USER": "postgres", "PASSWORD": ""}
        with _database_at(**where):
            yield pg
    finally:
        pg.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def armed_on_private_pg(private_pg, armed):  # in this order: the armed rows go to the private server
    return private_pg, armed


@contextmanager
def _every_slot_taken(pg):
    """Connections of the test's own in every slot of the server, the other sessions (the pool's)
    ended: each new connection anyone opens is refused with "too many clients already"."""
    dsn = f"host=127.0.0.1 port={pg.port} user=postgres dbname={pg.dbname}"
    held: list[psycopg.Connection] = []
    try:
        while True:
            try:
                held.append(psycopg.connect(dsn, autocommit=True, connect_timeout=10))
                continue
            except psycopg.OperationalError as exc:
                assert "too many clients" in str(exc), exc
            assert held, "no slot was free to take"
            mine = [c.info.backend_pid for c in held]
            others = "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND NOT pid = ANY(%s)"
            left = held[0].execute(others, [mine]).fetchall()
            if not left:
                break
            for (pid,) in left:  # its slot is free once it ends: the loop takes it
                held[0].execute("SELECT pg_terminate_backend(%s)", [pid])
        with pytest.raises(psycopg.OperationalError, match="too many clients"):
            psycopg.connect(dsn, connect_timeout=10)
        # The process learns it as a worker's threads do, within a second (dbgate.CHECK_EVERY_S);
        # a write tried before that waits out the pool's timeout first (its own test: test_db_pool).
        assert wait_for(GATE.away, timeout=30), GATE.state()
        yield
    finally:
        for conn in held:
            conn.close()
        assert wait_for(lambda: _connects(dsn), timeout=30), "the server never took a connection again"
        # A verdict is kept JUST_CHECKED_S (a worker's next tick is a poll interval away): the
        # process learns the slots are free with its next check, as a worker's next tick does.
        assert wait_for(lambda: not GATE.away(max_age=0.0), timeout=30), GATE.state()


def _connects(dsn) -> bool:
    """Whether a new connection opens (a closed session's slot is free once its backend exits)."""
    try:
        psycopg.connect(dsn, connect_timeout=10).close()
    except psycopg.OperationalError:
        return False
    return True


def test_a_death_is_paged_while_postgresql_refuses_every_connection_and_the_readings_are_written_after(
    armed_on_private_pg, eager, receiver, spool_here
):
    pg, armed = armed_on_private_pg
    with connection.cursor() as cursor:
        cursor.execute("SELECT inet_server_port()")
        assert cursor.fetchone()[0] == pg.port
    _death_while_away(armed, receiver, spool_here, lambda: _every_slot_taken(pg), says="too many clients")


# The case both vendors run ---------------------------------------------------------------------


def _tick(poller, ticks):
    """A metrics tick as the worker's thread runs it (`run_duty`: nothing raised, the connection
    given back after), its engines made due; its start and end kept (epoch s)."""
    for engine in poller.engines:
        if engine.last_poll_at is not None:
            engine.last_poll_at -= timedelta(seconds=poller.poll_interval)
    began, cycles = time.time(), poller.cycles["metrics"]
    poller.run_duty("metrics")
    assert poller.cycles["metrics"] == cycles + 1 and poller.cycles["failed"] == 0, poller.cycles
    ticks.append((began, time.time()))


def _death_while_away(armed, receiver, spool, away, says):
    engine, proc, poller = armed
    _steady(engine, poller)
    ticks: list[tuple[float, float]] = []
    _tick(poller, ticks)  # a reading stored before
    assert poller.held_state()["since"] is None
    assert wait_for(lambda: poller.exit_watch.pids_of(engine.pk) == [proc.pid]), "the tick let the pidfd go"
    waited = _pool_timeouts()
    # A page is open throughout (a live socket of this process): the poller's live pushes render
    # cards from the database, and must not wait on it while it is away.
    sockets.local += 1
    try:
        died, key = _outage(armed, receiver, spool, away, says, ticks, waited)
    finally:
        sockets.local -= 1
    _after(armed, receiver, spool, ticks, died, key)


def _outage(armed, receiver, spool, away, says, ticks, waited):
    engine, proc, poller = armed
    with away():
        died = timezone.now()
        proc.send_signal(signal.SIGKILL)
        assert wait_for(lambda: len(firing_pages(receiver)) == 1, timeout=30), "no page during the outage"
        key, body = firing_pages(receiver)[0]
        assert key.startswith("sparkops-spool-") and body["rule"] == "engine_down" and body["engine"] == engine.name
        assert GATE.state()["away"] and says in GATE.state()["why"], GATE.state()  # away as this case makes it
        assert len(list(spool.glob("*/alert-*.json"))) == 1  # the alert is the spool's, not the database's
        for _ in range(TICKS):  # the poller polls on, holding what it reads
            _tick(poller, ticks)
        held = poller.held_state()
        assert held["since"] is not None and held["samples"] > 0 and held["dropped"] == 0, held
        poller.run_duty("probe")  # the backstop probe sees the same death: nothing more
        assert len(firing_pages(receiver)) == 1
        assert _pool_timeouts() == waited  # nothing waited out the pool's timeout for a connection
        assert poller.live.stats["skipped_db_away"] > 0  # the page's pushes were there to be made
    return died, key


def _after(armed, receiver, spool, ticks, died, key):
    engine, _proc, poller = armed
    _tick(poller, ticks)  # the first store that goes through writes what was held, then the alert
    assert poller.held_state()["since"] is None and not poller.pending
    event = AlertEvent.objects.get(rule="engine_down")
    assert event.state == "firing"
    assert abs(event.started_at - died) < timedelta(seconds=1), (event.started_at, died)
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == "sent" and delivery.idempotency_key == key
    assert not list(spool.glob("*/alert-*.json"))  # the spool is empty again
    assert Engine.objects.get(pk=engine.pk).status == "down"
    _every_tick_stored(engine, ticks)
    for _ in range(2):  # the probes after the outage confirm the death, and page nobody
        poller.probe_tick()
    assert AlertEvent.objects.filter(rule="engine_down").count() == 1
    assert Delivery.objects.filter(transition="firing").count() == 1
    assert len(firing_pages(receiver)) == 1


def _pool_timeouts() -> int:
    """How many times this process's connection pool gave no connection in time (SQLite: none)."""
    if connection.vendor != "postgresql":
        return 0
    return connection.pool.get_stats().get("requests_errors", 0)


def _every_tick_stored(engine, ticks):
    """The engine's 'up' series holds one reading for each tick, those taken while the database
    was away among them: its widest gap is the ticks' spacing, whatever the outage's length."""
    series = Series.objects.get(engine=engine, metric="up")
    stamps = [ts.timestamp() for ts in Sample.objects.filter(series=series).values_list("ts", flat=True)]
    for began, ended in ticks:
        assert any(began - SLACK_S <= t <= ended + SLACK_S for t in stamps), (began, ended, stamps)
    span = [t for t in stamps if ticks[0][0] - SLACK_S <= t <= ticks[-1][1] + SLACK_S]
    assert len(span) == len(ticks), (span, ticks)
    assert not Sample.objects.values("series_id", "ts").annotate(n=Count("id")).filter(n__gt=1).exists()
