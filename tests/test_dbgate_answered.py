"""The database gate learns from every query of its process that goes through (dashboard/dbgate.py):
a verdict that fresh needs no connection of the gate's own, and a refused query teaches nothing."""

import os
import signal
import threading
import time

import pytest
from django.db import OperationalError, connection

from dashboard.dbgate import CONNECT_TIMEOUT_S, GATE, PROBE
from dashboard.models import Engine


@pytest.fixture
def stale_gate():
    # All of the verdict, back_at too: a later test on this worker that judges a box by its last
    # report counts from the database's return (database_back_at), and a return made here reads as
    # "the database just came back: no box is stale yet" (CI: eleven stale-box tests failed after one).
    saved = (GATE.checked_at, GATE._skip, GATE.away_since, GATE.why, GATE.back_at)
    GATE.checked_at, GATE._skip = float("-inf"), False
    yield GATE
    GATE.checked_at, GATE._skip, GATE.away_since, GATE.why, GATE.back_at = saved


@pytest.mark.django_db
def test_a_query_that_went_through_is_the_gates_verdict(stale_gate):
    Engine.objects.exists()
    answered_at = stale_gate.checked_at
    assert answered_at > float("-inf")  # the query itself refreshed the verdict
    assert stale_gate.away() is False
    assert stale_gate.checked_at == answered_at  # no check of its own: the query's answer stood


@pytest.mark.django_db
def test_a_refused_query_refreshes_nothing(stale_gate):
    def refuse(execute, sql, params, many, context):
        raise OperationalError("the test refuses this query")

    Engine.objects.exists()  # the connection is open (and wrapped) before the refusal
    stale_gate.checked_at = float("-inf")
    with connection.execute_wrapper(refuse), pytest.raises(OperationalError):
        Engine.objects.exists()
    assert stale_gate.checked_at == float("-inf")


@pytest.mark.django_db
def test_the_gates_check_keeps_its_session_and_a_lost_one_is_no_outage(stale_gate):
    """A check asks `SELECT 1` over the session it kept (a new one per check was 11 % of the
    worker's CPU); a session the server ended (a restart, an administrator) is replaced at the
    next check, which still finds the server answering."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no server to check")
    PROBE.close()
    assert stale_gate.away(max_age=0.0) is False
    pid = PROBE._conn.info.backend_pid
    stale_gate.checked_at = float("-inf")
    assert stale_gate.away(max_age=0.0) is False
    assert PROBE._conn.info.backend_pid == pid  # the same session: no new connection for this check
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    stale_gate.checked_at = float("-inf")
    assert stale_gate.away(max_age=0.0) is False and stale_gate.away_since is None, stale_gate.state()
    assert PROBE._conn.info.backend_pid != pid
    PROBE.close()


@pytest.mark.django_db
def test_a_kept_session_that_never_answers_is_the_server_away_within_the_checks_timeout(stale_gate):
    """A server that takes the query and never answers (its backend stopped: hung, or frozen) is
    called away within CONNECT_TIMEOUT_S, as a new connection's timeout would have; the next check
    after it answers again opens a new session and finds it back."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no server to check")
    if os.geteuid() != 0:
        pytest.skip("stopping a backend of the shared server needs root")
    PROBE.close()
    assert stale_gate.away(max_age=0.0) is False
    pid = PROBE._conn.info.backend_pid
    verdict: list[tuple[bool, float]] = []

    def check():
        began = time.monotonic()
        verdict.append((stale_gate.away(max_age=0.0), time.monotonic() - began))

    stale_gate.checked_at = float("-inf")
    os.kill(pid, signal.SIGSTOP)
    try:
        checking = threading.Thread(target=check, daemon=True)
        checking.start()
        checking.join(timeout=CONNECT_TIMEOUT_S + 5)  # a check that waits on the query never ends
    finally:
        os.kill(pid, signal.SIGCONT)  # the backend answers again (and ends: its session was closed)
    checking.join(timeout=30)
    assert verdict and verdict[0][0] is True, (verdict, stale_gate.state())
    assert verdict[0][1] < CONNECT_TIMEOUT_S + 0.5, verdict  # the check's own timeout, not the query's wait
    assert "within" in stale_gate.state()["why"], stale_gate.state()
    stale_gate.checked_at = float("-inf")
    assert stale_gate.away(max_age=0.0) is False and PROBE._conn.info.backend_pid != pid
    PROBE.close()
