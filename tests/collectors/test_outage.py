"""A database outage loses nothing a poller already read (issue 31, item 4).

The database is made to refuse for real (tests/dbfaults.py: another connection holds the lock
the store needs, and the store gives up after a short wait, as against a database that is
locked or gone), then given back: every reading held across the failed stores is written by
the next one, once. An alert starts when its condition was seen, not when it could be written.

Transactional tests: the refusal comes from a second connection, which must not see a test
transaction of this one."""

import contextlib
import logging
from datetime import timedelta

import pytest
from django.db import DatabaseError
from django.db.models import Count
from django.utils import timezone

from dashboard.models import Engine, Sample
from simulator.fleet import FleetThread
from sparkops.alerts.evaluate import Memory, evaluate_liveness
from sparkops.alerts.models import AlertEvent, RuleState
from sparkops.poller.liveness import Liveness
from sparkops.poller.resident import ResidentPoller
from tests.dbfaults import refusing
from tests.waiting import HAND_TICKED

pytestmark = pytest.mark.django_db(transaction=True)


def _tick_again(poller):
    """As if the engine's interval and the flush interval had passed (no sleeping)."""
    for engine in poller.engines:
        engine.last_poll_at -= timedelta(seconds=5)
    poller.flushed_at = float("-inf")


def _duplicates():
    return Sample.objects.values("series_id", "ts").annotate(n=Count("id")).filter(n__gt=1).count()


def test_readings_held_across_failed_stores_are_all_written_once_the_database_returns(fleet, caplog):
    with FleetThread(1, "vllm") as sims:
        Engine.objects.filter(pk=fleet["vllm"].pk).update(url=sims.urls[0], status="up")
        Engine.objects.filter(pk=fleet["llama"].pk).delete()
        poller = ResidentPoller("spark-1", poll_interval=HAND_TICKED, duties={}, flush_interval=60)
        poller.metrics_tick()  # the first tick is stored at once
        stored = Sample.objects.count()
        with refusing(Sample):
            # Two ticks whose stores the database refuses: neither raises, both keep their readings.
            caplog.set_level(logging.WARNING, logger="sparkops.poller.resident")
            _tick_again(poller)
            poller.metrics_tick()
            first_held = len(poller.pending.batch.samples)
            _tick_again(poller)
            poller.metrics_tick()
            held = list(poller.pending.batch.samples)
        assert Sample.objects.count() == stored  # nothing got through
        assert first_held > 0 and len(held) > first_held  # the second tick's readings were added to the first's
        assert "storing the readings failed" in caplog.text and "held for the next store" in caplog.text
        # The database is back: the next store writes everything held, each reading once.
        poller.flush()
    assert Sample.objects.count() == stored + len(held)
    assert _duplicates() == 0
    assert not poller.pending


def test_a_failed_tick_keeps_what_was_held(fleet):
    """A tick that fails outright (its store raised before the rest of it ran) re-reads its
    engine list next time, but what it held stays held."""
    with FleetThread(1, "vllm") as sims:
        Engine.objects.filter(pk=fleet["vllm"].pk).update(url=sims.urls[0], status="up")
        Engine.objects.filter(pk=fleet["llama"].pk).delete()
        poller = ResidentPoller("spark-1", poll_interval=HAND_TICKED, duties={}, flush_interval=60)
        poller.metrics_tick()
        stored = Sample.objects.count()
        poller.engines[0].last_poll_at -= timedelta(seconds=5)
        poller.metrics_tick()  # held (flush interval not passed)
        held = len(poller.pending.batch.samples)
        assert held > 0
        with refusing(Sample), pytest.raises(DatabaseError):
            poller.flush()  # `poll --once` and stop() see the error…
        assert len(poller.pending.batch.samples) == held  # …and nothing held is lost
        poller.forget(keep_held=True)  # what run_duty does after a failed metrics tick
        assert len(poller.pending.batch.samples) == held
        poller.flush()
    assert Sample.objects.count() == stored + held
    assert _duplicates() == 0


def test_held_readings_are_bounded_the_oldest_dropped_first_and_said(fleet, settings, caplog):
    with FleetThread(1, "vllm") as sims:
        Engine.objects.filter(pk=fleet["vllm"].pk).update(url=sims.urls[0], status="up")
        Engine.objects.filter(pk=fleet["llama"].pk).delete()
        poller = ResidentPoller("spark-1", poll_interval=HAND_TICKED, duties={}, flush_interval=60)
        poller.metrics_tick()
        stored = Sample.objects.count()
        caplog.set_level(logging.WARNING, logger="sparkops.poller.resident")
        with refusing(Sample):
            _tick_again(poller)
            poller.metrics_tick()
            first = list(poller.pending.batch.samples)
            settings.SPARKOPS_FLUSH_HOLD_MAX = len(first) + 3  # room for one tick and 3 samples more
            _tick_again(poller)
            poller.metrics_tick()
            held = list(poller.pending.batch.samples)
        second = held[3:]
        assert len(held) == len(first) + 3 and len(second) > 3
        assert held[:3] == first[-3:]  # the older tick's oldest went first; its newest 3 stay
        dropped = len(first) - 3
        assert f"{dropped} oldest samples dropped unstored" in caplog.text
        poller.flush()
    assert Sample.objects.count() == stored + len(held)
    assert _duplicates() == 0


def test_an_alert_starts_when_the_death_was_seen_not_when_it_could_be_written(fleet):
    """The probe that saw the engine die ran during the outage (its evaluation could not be
    written); the one after the database returned writes the alert, which starts at the first."""
    vllm, memory = fleet["vllm"], Memory()
    seen = timezone.now() - timedelta(seconds=20)  # the probe's own time, carried in its finding
    # the resident poller logs the DatabaseError and probes on (its _guard)
    with refusing(AlertEvent, RuleState), contextlib.suppress(DatabaseError):
        evaluate_liveness(Liveness(vllm, "down", "connection refused", True, seen, changed=True), memory=memory)
    assert not AlertEvent.objects.filter(rule="engine_down").exists()
    evaluate_liveness(Liveness(vllm, "down", "connection refused", True, timezone.now(), changed=False), memory=memory)
    event = AlertEvent.objects.get(rule="engine_down", subject="vllm-main")
    assert abs((event.started_at - seen).total_seconds()) < 1.0, (event.started_at, seen)
