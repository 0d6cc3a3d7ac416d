"""Readings survive an outage of the database (issue 46, item 2), on a clock, without waiting.

The database refuses every write for real (each new connection read-only, by the database
itself: tests/alerts/test_db_away.read_only_everywhere) for five minutes of a moved clock; the
poller ticks every 2 s of that clock through it, holding what it reads, and the first store after
writes it all: no gap in the engine's series beyond one poll interval, each reading once. A box
that could not report meanwhile is not stale once the database is back."""

import itertools
import logging
from datetime import timedelta

import pytest
import time_machine
from django.db.models import Count
from django.utils import timezone

from dashboard import clock
from dashboard.dbgate import GATE
from dashboard.models import Engine, Host, Sample, Series
from simulator.fleet import FleetThread
from sparkops.alerts.evaluate import evaluate
from sparkops.alerts.models import AlertEvent
from sparkops.poller.resident import ResidentPoller
from tests.alerts.test_db_away import read_only_everywhere
from tests.waiting import HAND_TICKED

pytestmark = pytest.mark.django_db(transaction=True)
POLL_S = 2.0
OUTAGE_S = 300.0


@pytest.fixture(autouse=True)
def fresh_gate(settings, tmp_path):
    settings.SPARKOPS_SPOOL_DIR = str(tmp_path / "spool")
    GATE.__init__()
    yield
    GATE.__init__()
    clock.offset_s()  # measured again off the moved clock: the offset is the process's


def _next_tick(poller, traveller):
    """POLL_S later on the clock: the engines due again (their last poll that long ago)."""
    traveller.shift(timedelta(seconds=POLL_S))
    for engine in poller.engines:
        engine.last_poll_at -= timedelta(seconds=POLL_S)


def test_five_minutes_of_refused_writes_leave_no_gap_in_the_series(fleet, caplog):
    caplog.set_level(logging.WARNING)
    with FleetThread(1, "vllm") as sims, time_machine.travel(timezone.now(), tick=False) as traveller:
        Engine.objects.filter(pk=fleet["vllm"].pk).update(url=sims.urls[0], status="up")
        Engine.objects.filter(pk=fleet["llama"].pk).delete()
        poller = ResidentPoller("spark-1", poll_interval=HAND_TICKED, duties={}, flush_interval=10)
        poller.metrics_tick()  # stored at once
        began = timezone.now()
        with read_only_everywhere():
            for _ in range(int(OUTAGE_S / POLL_S)):
                _next_tick(poller, traveller)
                poller.run_duty("metrics")  # as the thread runs it: nothing raised, nothing lost
            held = poller.held_state()
            assert held["since"] is not None and held["samples"] > 0 and held["dropped"] == 0
            assert poller.cycles["metrics"] == int(OUTAGE_S / POLL_S) and poller.cycles["failed"] == 0
        _next_tick(poller, traveller)
        poller.run_duty("metrics")  # the database is back: everything held is stored
        assert poller.held_state()["since"] is None and not poller.pending
    series = Series.objects.get(engine=fleet["vllm"], metric="up")
    times = list(Sample.objects.filter(series=series, ts__gte=began).order_by("ts").values_list("ts", flat=True))
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    assert times[-1] - times[0] >= timedelta(seconds=OUTAGE_S)
    assert max(gaps) <= POLL_S + 0.5, max(gaps)  # no gap: one reading per tick, outage or not
    assert not Sample.objects.values("series_id", "ts").annotate(n=Count("id")).filter(n__gt=1).exists()
    assert "the readings held for" in caplog.text


def test_a_box_silent_through_an_outage_is_not_stale_when_the_database_returns(fleet):
    """collector_stale counts a box's silence from the database's return (this process saw it come back)."""
    clock.offset_s()
    host = Host.objects.get(name="spark-1")
    Host.objects.filter(pk=host.pk).update(last_report_at=timezone.now() - timedelta(seconds=OUTAGE_S))
    GATE._mark("the database cannot be reached (test)")
    GATE.reachable()  # the outage ended now
    evaluate("beat")
    assert not AlertEvent.objects.filter(rule="collector_stale", state="firing").exists()
    GATE.back_at -= timedelta(seconds=60)  # it ended a minute ago, and the box is still silent: stale
    evaluate("beat")
    assert AlertEvent.objects.filter(rule="collector_stale", state="firing", host=host).exists()


def test_a_roles_refresh_keeps_what_the_poller_knew_of_each_engine(fleet, django_assert_num_queries):
    """The roles' read defers `latest` (poller/fleet.py); an engine with no unit has its rules read it.
    Loaded then, it would wait on the pool of a database gone away meanwhile and the death would go
    unpaged: the fresh objects carry what the poller last knew until the engine's next poll."""
    poller = ResidentPoller("spark-1", poll_interval=HAND_TICKED, duties={}, flush_interval=10)
    known = Engine.objects.get(pk=fleet["llama"].pk)
    known.latest = {"up": 1, "kv_cache_usage": 0.5}
    poller.engines = [known]
    fresh = list(Engine.objects.filter(pk=known.pk).defer("latest"))
    kept = poller._with_held(fresh)
    assert kept[0] is fresh[0] and "latest" not in kept[0].get_deferred_fields()
    with django_assert_num_queries(0):
        assert kept[0].latest == {"up": 1, "kv_cache_usage": 0.5}
    stranger = list(Engine.objects.filter(pk=fleet["vllm"].pk).defer("latest"))
    assert "latest" in poller._with_held(stranger)[0].get_deferred_fields()  # nothing known: loaded as before
