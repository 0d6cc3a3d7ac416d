"""Rules of the operator's own (issue 51): evaluated over stored readings on a clock, through the
same lifecycle, routes and outbox as the built-in rules; refused with the reason when bad."""

from datetime import timedelta

import pytest
import time_machine
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

from dashboard.models import Sample, Series
from dashboard.samples.store import SeriesIds, WriteBatch
from sparkops.alerts import outbox
from sparkops.alerts.custom_services import custom_rule_create, custom_rule_enable, custom_rule_remove
from sparkops.alerts.evaluate import Memory, evaluate_host, evaluate_polled
from sparkops.alerts.lifecycle import renotify_due
from sparkops.alerts.models import AlertEvent, CustomRule, Delivery, Route
from sparkops.alerts.services import maintenance_create, silence_create
from sparkops.collectors.derive import empty_reading
from sparkops.poller.reading import engine_apply

pytestmark = pytest.mark.django_db
POLL_S = 2.0  # the metrics tick
# The lifecycle's "now" is the database's (dashboard/clock.py): SQLite's is this process's, which
# time-machine moves; PostgreSQL's is its server's, which no test clock moves.
process_clock_is_the_databases = pytest.mark.skipif(
    connection.vendor == "postgresql", reason="PostgreSQL's clock_timestamp() does not follow time-machine"
)


def send_all():
    """What the worker does: send every due row once."""
    for pk in Delivery.objects.filter(status="pending").values_list("pk", flat=True):
        outbox.delivery_send(delivery_id=pk)


class Poller:
    """A metrics tick as the resident poller runs it: store the reading's samples and the engine
    row, then evaluate the tick's rules with the poller's alert memory."""

    def __init__(self, engine):
        self.engine, self.series, self.memory = engine, SeriesIds(), Memory()

    def tick(self, kv_usage):
        now = timezone.now()
        reading = empty_reading(name=self.engine.name, kind=self.engine.kind)
        reading.update({"up": True, "status": "up", "kv_cache_usage": kv_usage, "requests_running": 3.0})
        batch = WriteBatch(self.series)
        batch.add_samples(ts=now, engine=self.engine, values={"kv_cache_usage": kv_usage})
        batch.flush()
        engine_apply(self.engine, reading, now)
        self.engine.save()
        return evaluate_polled([(self.engine, reading)], memory=self.memory)


def kv_rule(**extra):
    data = {
        "name": "kv-high",
        "scope": "engine",
        "engine": "vllm-main",
        "metric": "kv_cache_usage",
        "comparator": ">",
        "threshold": "0.95",
        "for": "5m",
        "severity": "warning",
        "channels": ["ops-hook"],
    }
    return custom_rule_create(data={**data, **extra})


@pytest.fixture
def routed(channels):
    """Both channels route something already (engine_down), so a route for the custom rule is what sends it."""
    for channel in channels.values():
        Route.objects.create(channel=channel, rule="engine_down", min_severity="info")
    return channels


@process_clock_is_the_databases
def test_kv_above_95_for_5_minutes_fires_once_to_its_channel_and_resolves(fleet, routed, receiver, smtp):
    rule = kv_rule()
    assert rule.key == "custom.kv-high" and rule.for_s == 300
    poller = Poller(fleet["vllm"])
    with time_machine.travel(timezone.now(), tick=False) as clock:
        poller.tick(0.50)
        clock.shift(POLL_S)
        crossed = timezone.now()
        fired_at = None
        for _ in range(200):  # 400 s above the threshold, one tick every 2 s
            poller.tick(0.97)
            event = AlertEvent.objects.get(rule="custom.kv-high")
            if event.state == "firing" and fired_at is None:
                fired_at = timezone.now()
            clock.shift(POLL_S)
        assert fired_at is not None
        # The target: within one poll interval plus its "for" duration of the first reading above.
        assert timedelta(seconds=300) <= fired_at - crossed <= timedelta(seconds=300 + POLL_S)
        send_all()
        poller.tick(0.40)
        send_all()
    event = AlertEvent.objects.get(rule="custom.kv-high")
    assert event.state == "resolved" and event.subject == "vllm-main" and event.severity == "warning"
    assert "kv_cache_usage is 0.97 (> 0.95 for 300 s)" in event.message
    bodies = [body for _, body in receiver.accepted()]
    assert [b["transition"] for b in bodies] == ["firing", "resolved"]  # fired once in 200 ticks
    assert bodies[0]["rule"] == "custom.kv-high"
    assert smtp.messages == []  # the email channel is not routed to this rule
    kv = Series.objects.get(engine=fleet["vllm"], metric="kv_cache_usage")
    assert Sample.objects.filter(series=kv).count() == 202  # it judged the readings that were stored


def test_pending_for_its_duration_then_firing_on_any_database(fleet, routed, receiver):
    """The same lifecycle where the database keeps its own clock: a pending event 300 s old fires on the next tick."""
    kv_rule()
    poller = Poller(fleet["vllm"])
    poller.tick(0.97)
    event = AlertEvent.objects.get(rule="custom.kv-high")
    assert event.state == "pending"
    AlertEvent.objects.filter(pk=event.pk).update(started_at=event.started_at - timedelta(seconds=299))
    poller.memory = Memory()  # its open events re-read (a poller's are, every open_ttl_s)
    poller.tick(0.97)
    assert AlertEvent.objects.get(pk=event.pk).state == "pending"
    AlertEvent.objects.filter(pk=event.pk).update(started_at=event.started_at - timedelta(seconds=301))
    poller.memory = Memory()
    poller.tick(0.97)
    assert AlertEvent.objects.get(pk=event.pk).state == "firing"
    send_all()
    assert [b["transition"] for _, b in receiver.accepted()] == ["firing"]


def test_a_blip_shorter_than_its_duration_notifies_nobody(fleet, routed, receiver):
    kv_rule()
    poller = Poller(fleet["vllm"])
    with time_machine.travel(timezone.now(), tick=False) as clock:
        for usage in [0.97] * 100 + [0.5]:  # 200 s above, then back
            poller.tick(usage)
            clock.shift(POLL_S)
    send_all()
    assert not AlertEvent.objects.filter(rule="custom.kv-high").exists()
    assert receiver.accepted() == []


def test_a_silence_on_the_rule_key_suppresses_its_notification(fleet, routed, receiver):
    kv_rule(**{"for": "0"})
    silence_create(rule="custom.kv-high", hours=1, reason="load test")
    Poller(fleet["vllm"]).tick(0.99)
    send_all()
    event = AlertEvent.objects.get(rule="custom.kv-high")
    assert event.state == "firing" and receiver.accepted() == []
    assert event.notes.filter(kind="suppressed").exists()


def test_every_engine_rule_judges_each_engine_apart(fleet):
    kv_rule(engine="", name="kv-any", **{"for": "0"})
    Poller(fleet["llama"]).tick(0.99)
    Poller(fleet["vllm"]).tick(0.10)
    assert list(AlertEvent.objects.filter(rule__startswith="custom.").values_list("rule", "subject", "state")) == [
        ("custom.kv-any", "llama-side", "firing")
    ]


def test_a_host_rule_reads_the_hosts_stored_number(fleet):
    custom_rule_create(
        data={"name": "gpu-hot", "scope": "host", "metric": "gpu0.temperature_c", "comparator": ">=", "threshold": 85}
    )
    reading = {"host": {}, "gpus": [{"index": 0, "temperature_c": 91}], "processes": {}}
    evaluate_host(fleet["host"], reading)
    event = AlertEvent.objects.get(rule="custom.gpu-hot")
    assert event.state == "firing" and event.subject == "spark-1" and "is 91" in event.message
    evaluate_host(fleet["host"], {**reading, "gpus": [{"index": 0, "temperature_c": 70}]})
    assert AlertEvent.objects.get(rule="custom.gpu-hot").state == "resolved"


def test_a_disabled_or_removed_rule_resolves_what_it_opened(fleet):
    rule = kv_rule(**{"for": "0", "channels": []})
    Poller(fleet["vllm"]).tick(0.99)
    assert AlertEvent.objects.get(rule=rule.key).state == "firing"
    custom_rule_remove(name="kv-high")
    assert AlertEvent.objects.get(rule=rule.key).state == "resolved"
    assert not CustomRule.objects.exists() and not Route.objects.filter(rule=rule.key).exists()


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"metric": "kv_usage_typo"}, "metric", "unknown engine metric 'kv_usage_typo'"),
        ({"threshold": "high"}, "threshold", "'high' is not a number"),
        ({"threshold": "nan"}, "threshold", "not a finite number"),
        ({"name": "kv\nhigh"}, "name", "U+000A (LINE FEED) at character 3"),
        ({"name": "x" * 34}, "name", "at most 33"),
        ({"comparator": "=="}, "comparator", "'==' is not a comparator"),
        ({"for": "soon"}, "for", "'soon' is not a duration"),
        ({"engine": "nope"}, "engine", "no engine named 'nope'"),
        ({"severity": "loud"}, "severity", "'loud' is not a severity"),
        ({"channels": ["chat"]}, "channels", "no channel named 'chat'"),
    ],
)
def test_a_bad_definition_is_refused_with_its_reason_and_changes_nothing(fleet, change, field, reason):
    with pytest.raises(ValidationError) as refused:
        kv_rule(**change)
    assert reason in " ".join(refused.value.message_dict[field])
    assert not CustomRule.objects.exists() and not Route.objects.exists()


def test_a_metric_only_the_store_knows_is_accepted(fleet):
    Series.objects.create(engine=fleet["vllm"], metric="spec_decode_draft_tokens_per_s")
    rule = kv_rule(metric="spec_decode_draft_tokens_per_s")
    assert rule.metric == "spec_decode_draft_tokens_per_s"


def test_a_maintenance_window_on_the_engine_suppresses_it(fleet, routed, receiver):
    kv_rule(**{"for": "0"})
    now = timezone.now()
    maintenance_create(starts_at=now - timedelta(minutes=1), ends_at=now + timedelta(hours=1), engine=fleet["vllm"])
    Poller(fleet["vllm"]).tick(0.99)
    send_all()
    assert AlertEvent.objects.get(rule="custom.kv-high").state == "firing" and receiver.accepted() == []


@process_clock_is_the_databases
def test_a_critical_custom_rule_pages_again_until_acknowledged(fleet, routed, receiver, settings):
    settings.SPARKOPS_ALERT_RENOTIFY_S = 600
    kv_rule(**{"for": "0", "severity": "critical"})
    with time_machine.travel(timezone.now(), tick=False) as clock:
        Poller(fleet["vllm"]).tick(0.99)
        assert renotify_due() == 0
        clock.shift(601)
        assert renotify_due() == 1
        send_all()
    assert [b["transition"] for _, b in receiver.accepted()] == ["firing", "renotify"]
    assert AlertEvent.objects.get(rule="custom.kv-high").incident is not None  # critical: an incident, as built-ins


def test_a_disabled_rule_resolves_on_its_next_tick_and_stays_quiet(fleet):
    kv_rule(**{"for": "0", "channels": []})
    poller = Poller(fleet["vllm"])
    poller.tick(0.99)
    custom_rule_enable(name="kv-high", enabled=False)
    Poller(fleet["vllm"]).tick(0.99)  # a fresh memory: a poller sees it within its config_ttl_s
    assert AlertEvent.objects.get(rule="custom.kv-high").state == "resolved"
    Poller(fleet["vllm"]).tick(0.99)
    assert AlertEvent.objects.filter(rule="custom.kv-high").count() == 1


def test_a_psi_stall_rule_reads_the_rate_between_two_host_readings(fleet):
    custom_rule_create(
        data={
            "name": "mem-stall",
            "scope": "host",
            "metric": "psi.memory.some.stall_pct",
            "comparator": ">",
            "threshold": 10,
        }
    )

    def reading(total_us):
        return {"host": {"psi": {"memory": {"some": {"avg10": 0.0, "avg60": 0.0, "total": total_us}}}}}

    with time_machine.travel(timezone.now(), tick=False) as clock:
        evaluate_host(fleet["host"], reading(0))
        clock.shift(2)
        evaluate_host(fleet["host"], reading(1_000_000))  # 1 s of stall in 2 s: 50 %
    event = AlertEvent.objects.get(rule="custom.mem-stall")
    assert event.state == "firing" and "stall_pct is 50" in event.message


@pytest.mark.skipif(connection.vendor != "sqlite", reason="a failed read aborts PostgreSQL's test transaction")
def test_a_poller_goes_on_with_the_rules_it_read_when_their_table_does_not_answer(fleet):
    kv_rule(**{"for": "0", "channels": []})
    poller = Poller(fleet["vllm"])
    poller.tick(0.5)  # read and kept
    signal = "engine_polled"
    read_at, rules = poller.memory.custom_rules[signal]
    poller.memory.custom_rules[signal] = (read_at - 3600, rules)  # due to be read again
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE alerts_customrule RENAME TO alerts_customrule_away")
    poller.tick(0.99)
    assert AlertEvent.objects.get(rule="custom.kv-high").state == "firing"  # judged by the rule it kept
    fresh = Poller(fleet["llama"])  # nothing read yet: the built-in rules alone, the tick goes on
    fresh.tick(0.99)
    assert AlertEvent.objects.filter(rule="kv_saturated", subject="llama-side").exists()
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE alerts_customrule_away RENAME TO alerts_customrule")
