"""The database gate learns from every query of its process that goes through (dashboard/dbgate.py):
a verdict that fresh needs no connection of the gate's own, and a refused query teaches nothing."""

import pytest
from django.db import OperationalError, connection

from dashboard.dbgate import GATE
from dashboard.models import Engine


@pytest.fixture
def stale_gate():
    saved = (GATE.checked_at, GATE._skip, GATE.away_since, GATE.why)
    GATE.checked_at, GATE._skip = float("-inf"), False
    yield GATE
    GATE.checked_at, GATE._skip, GATE.away_since, GATE.why = saved


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
