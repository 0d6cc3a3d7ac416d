"""Beat's backstops of the leading worker's upkeep (alerts.sweep_outbox, alerts.check_stale, every
30 s) do nothing while the leader's own record in Redis says it ran that duty lately, and do it all
when the record is old, missing or stamped ahead of this clock (a leader whose clock runs fast proves
nothing). Real Redis; the collector-stale check is what shows whether a backstop evaluated."""

import time
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from sparkops.alerts.conf import leader_ran, sweep_interval_s, upkeep_runs_key
from sparkops.alerts.models import AlertEvent
from sparkops.alerts.tasks import check_stale

pytestmark = pytest.mark.django_db


@pytest.fixture
def record():
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(upkeep_runs_key())

    def ran(duty, age_s):
        client.lpush(upkeep_runs_key(), f"{time.time() - age_s:.3f} box-lead {duty}")

    yield ran
    client.delete(upkeep_runs_key())
    client.close()


def _stale(host):
    host.last_report_at = timezone.now() - timedelta(seconds=settings.SPARKOPS_POLL_INTERVAL * 3 + 30)
    host.save()


def _fired():
    return AlertEvent.objects.filter(rule="collector_stale", state="firing").exists()


def test_the_backstop_leaves_the_check_to_a_leader_that_ran_it_lately(fleet, record):
    _stale(fleet["host"])
    record("alerts-sweep-outbox", 1.0)  # another duty's run is no proof for this one
    assert not leader_ran("alerts-check-stale")
    record("alerts-check-stale", 1.0)
    assert leader_ran("alerts-check-stale")
    check_stale()
    assert not _fired()


@pytest.mark.parametrize("age_s", [None, "old", "ahead"])
def test_the_backstop_checks_when_the_leaders_record_proves_nothing(fleet, record, age_s):
    _stale(fleet["host"])
    if age_s == "old":
        record("alerts-check-stale", 3 * sweep_interval_s() + 5)
    elif age_s == "ahead":
        record("alerts-check-stale", -120.0)  # a leader whose clock runs two minutes fast
    assert not leader_ran("alerts-check-stale")
    check_stale()
    assert _fired()
