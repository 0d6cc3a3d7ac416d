"""A custom rule judged by the resident poller itself: a real metrics tick against a simulated
vLLM on 127.0.0.1, its reading stored, then the tick's rules (issue 51)."""

import pytest

from dashboard.models import Engine, Sample
from simulator.fleet import FleetThread
from sparkops.alerts.custom_services import custom_rule_create
from sparkops.alerts.models import AlertEvent
from sparkops.poller.resident import ResidentPoller
from tests.waiting import HAND_TICKED

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_poller_fires_a_custom_rule_on_the_tick_that_stored_the_reading(fleet):
    rule = {"engine": "vllm-main", "metric": "kv_cache_usage", "for": "0"}
    custom_rule_create(data={**rule, "name": "kv-any", "comparator": ">=", "threshold": 0})
    custom_rule_create(data={**rule, "name": "kv-impossible", "comparator": ">", "threshold": 1})
    with FleetThread(1, "vllm") as sims:
        Engine.objects.filter(pk=fleet["vllm"].pk).update(url=sims.urls[0], status="up")
        Engine.objects.filter(pk=fleet["llama"].pk).delete()
        poller = ResidentPoller("spark-1", poll_interval=HAND_TICKED, duties={}, flush_interval=0)
        poller.metrics_tick()
    stored = Sample.objects.filter(series__engine=fleet["vllm"], series__metric="kv_cache_usage").get()
    event = AlertEvent.objects.get(rule__startswith="custom.")
    assert (event.rule, event.subject, event.state) == ("custom.kv-any", "vllm-main", "firing")
    assert f"kv_cache_usage is {stored.value:.4g} (>= 0)" in event.message  # the number that was stored
