"""A metrics cycle's engines evaluated in one batch (evaluate_many): the same queries for 3 engines as for 1,
and each engine's rule memories, overrides and events kept apart."""

from datetime import timedelta
from typing import ClassVar

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dashboard.models import Engine
from sparkops.alerts.evaluate import Memory, evaluate, evaluate_many, evaluate_polled
from sparkops.alerts.models import AlertEvent, RuleState
from sparkops.alerts.services import rule_update

pytestmark = pytest.mark.django_db
UNIT = {
    "ActiveState": "active",
    "SubState": "running",
    "Result": "success",
    "ExecMainStatus": "0",
    "MainPID": "4242",
    "NRestarts": "0",
    "Restart": "always",
}


UNIT_PROBE = "test_unit_restart"


@pytest.fixture(autouse=True)
def unit_probe_rule():
    """A stand-in advisory keyed on the unit, off by default (what the batching is tested with; the
    product's own such advisory, unit_no_restart, became the launch audit's Restart check)."""
    from sparkops.alerts.finding import Finding
    from sparkops.alerts.rules import REGISTRY, Rule

    class UnitRestartProbe(Rule):
        key = UNIT_PROBE
        title = "Test advisory: unit will not restart on a clean exit"
        severity = "info"
        signal = "engine_polled"
        DEFAULTS: ClassVar[dict] = {}
        enabled_by_default = False

        def evaluate(self, *, settings, engine, reading, **_):
            unit = reading.get("unit")
            if not unit or not engine.unit or "Restart" not in unit:
                return []
            restart = unit.get("Restart") or "no"
            active = restart in ("no", "on-failure")
            return [Finding(subject=engine.unit, engine=engine, active=active, cause=restart, message=restart)]

    REGISTRY[UNIT_PROBE] = UnitRestartProbe()
    yield
    REGISTRY.pop(UNIT_PROBE, None)


@pytest.fixture
def engines(fleet):
    third = Engine.objects.create(
        name="vllm-two",
        kind="vllm",
        url="http://127.0.0.1:18003",
        host=fleet["host"],
        unit="vllm-two.service",
        status="up",
    )
    return [fleet["vllm"], fleet["llama"], third]


def reading(cycle, **unit):
    """A healthy engine's poll: the counters move, so two rules' memories change every cycle."""
    return {
        "kv_cache_usage": 0.3,
        "requests_running": 2,
        "requests_waiting": 0,
        "prefix_cache_queries_total": 1000 * cycle,
        "prefix_cache_hits_total": 900 * cycle,
        "unit": {**UNIT, **unit},
    }


def poll(engines, cycle, **unit):
    return evaluate_many("engine_polled", [{"engine": e, "reading": reading(cycle, **unit)} for e in engines])


def open_events():
    return {(e.rule, e.subject): e.state for e in AlertEvent.objects.filter(state__in=AlertEvent.OPEN_STATES)}


def queries(fn):
    with CaptureQueriesContext(connection) as ctx:
        fn()
    return [q["sql"] for q in ctx.captured_queries]


def test_three_engines_cost_no_more_queries_than_one(engines):
    poll(engines, 1)  # warm-up: creates the rule memories
    one = queries(lambda: poll(engines[:1], 2))
    three = queries(lambda: poll(engines, 3))
    assert open_events() == {}
    # custom rules, rule rows, memories, open events, one upsert of the changed memories
    assert len(three) <= len(one) <= 5, three
    assert sum(q.startswith("INSERT") for q in three) == 1 and not any(q.startswith("UPDATE") for q in three)


def test_steady_open_alerts_cost_no_more_queries(engines):
    """Every engine's unit lacks Restart=always: the advisory is open for each and says the same every poll."""
    rule_update(key=UNIT_PROBE, enabled=True)
    poll(engines, 1, Restart="on-failure")
    assert set(open_events()) == {(UNIT_PROBE, f"{e.unit}") for e in engines}
    one = queries(lambda: poll(engines[:1], 2, Restart="on-failure"))
    three = queries(lambda: poll(engines, 3, Restart="on-failure"))
    assert len(three) <= len(one) <= 5, three
    assert set(open_events()) == {(UNIT_PROBE, f"{e.unit}") for e in engines}


def test_batch_persists_each_engines_rule_memory(engines):
    poll(engines, 1)  # every unit at NRestarts=0
    before = {s.subject: s for s in RuleState.objects.filter(rule="restart_loop")}
    assert {name: s.data["nrestarts"] for name, s in before.items()} == {e.name: 0 for e in engines}
    # Next cycle: the second engine restarted twice, the third once, the first not; each changed memory is written.
    evaluate_many("engine_polled", [{"engine": e, "reading": reading(2, NRestarts=n)} for e, n in zip(engines, "021")])
    after = {s.subject: s for s in RuleState.objects.filter(rule="restart_loop")}
    assert [after[e.name].data["nrestarts"] for e in engines] == [0, 2, 1]
    assert [len(after[e.name].data["restarts"]) for e in engines] == [0, 2, 1]
    assert [after[e.name].updated_at > before[e.name].updated_at for e in engines] == [False, True, True]
    samples = {s.subject: s.data["samples"] for s in RuleState.objects.filter(rule="prefix_cache_drop")}
    assert {name: [q for _, q, _ in s] for name, s in samples.items()} == {e.name: [1000, 2000] for e in engines}


def test_batch_fires_and_resolves_per_engine(engines):
    rule_update(key="restart_loop", params={"count": 1})
    evaluate_many(
        "engine_polled",
        [
            {"engine": engines[0], "reading": {"restarted": True}},
            {"engine": engines[1], "reading": {}},
            {"engine": engines[2], "reading": {"restarted": True}},
        ],
    )
    assert open_events() == {("restart_loop", "vllm-main"): "firing", ("restart_loop", "vllm-two"): "firing"}


def test_per_engine_override_applies_to_its_engine_only(engines):
    rule_update(key="kv_saturated", params={"for_s": 0})
    rule_update(key="kv_saturated", engine=engines[1], params={"usage_pct": 50})
    evaluate_many("engine_polled", [{"engine": e, "reading": {"kv_cache_usage": 0.6}} for e in engines])
    assert open_events() == {("kv_saturated", "llama-side"): "firing"}


def test_rule_disabled_for_one_engine_resolves_only_its_events(engines):
    rule_update(key="kv_saturated", params={"for_s": 0})
    evaluate_many("engine_polled", [{"engine": e, "reading": {"kv_cache_usage": 0.99}} for e in engines])
    assert len(open_events()) == 3
    rule_update(key="kv_saturated", engine=engines[0], enabled=False)
    evaluate_many("engine_polled", [{"engine": e, "reading": {"kv_cache_usage": 0.99}} for e in engines])
    assert set(open_events()) == {("kv_saturated", "llama-side"), ("kv_saturated", "vllm-two")}
    assert AlertEvent.objects.get(rule="kv_saturated", subject="vllm-main").state == "resolved"


def test_one_broken_reading_never_stops_the_other_engines(engines, caplog):
    rule_update(key="kv_saturated", params={"for_s": 0})
    evaluate_many(
        "engine_polled",
        [
            {"engine": engines[0], "reading": {"kv_cache_usage": "junk"}},
            {"engine": engines[1], "reading": {"kv_cache_usage": 0.99}},
        ],
    )
    assert "alert rule kv_saturated failed" in caplog.text
    assert open_events() == {("kv_saturated", "llama-side"): "firing"}


def test_unchanged_pending_alert_still_fires_when_due(engines, django_assert_num_queries):
    """An open event a finding would not change is not locked and read again, but its duration still counts."""
    vllm = engines[0]
    evaluate("engine_polled", engine=vllm, reading={"kv_cache_usage": 0.99})  # kv_saturated: pending for 10 s
    assert open_events() == {("kv_saturated", "vllm-main"): "pending"}
    with django_assert_num_queries(4):  # the snapshot and the custom rules: nothing to observe, no memory changed
        evaluate("engine_polled", engine=vllm, reading={"kv_cache_usage": 0.99})
    assert open_events() == {("kv_saturated", "vllm-main"): "pending"}
    AlertEvent.objects.filter(rule="kv_saturated").update(started_at=timezone.now() - timedelta(seconds=11))
    evaluate("engine_polled", engine=vllm, reading={"kv_cache_usage": 0.99})
    assert open_events() == {("kv_saturated", "vllm-main"): "firing"}
    # A new explanation still reaches the open event, beside the message it fired with (issue 25, item 4).
    evaluate("engine_polled", engine=vllm, reading={"kv_cache_usage": 0.99, "requests_waiting": 7})
    event = AlertEvent.objects.get(rule="kv_saturated")
    assert "7 waiting" in event.details["latest"]["message"] and "0 waiting" in event.message


def test_a_finding_sees_what_an_earlier_subject_of_the_batch_opened(fleet):
    """Two engines behind one unit name share the advisory's subject: the batch reads as separate evaluations would."""
    rule_update(key=UNIT_PROBE, enabled=True)
    other = Engine.objects.create(
        name="vllm-alias",
        kind="vllm",
        url="http://127.0.0.1:18004",
        host=fleet["host"],
        unit="vllm-main.service",
        status="up",
    )
    evaluate_many(
        "engine_polled",
        [
            {"engine": fleet["vllm"], "reading": {"unit": {**UNIT, "Restart": "no"}}},
            {"engine": other, "reading": {"unit": UNIT}},
        ],
    )
    assert open_events() == {}
    assert AlertEvent.objects.get(rule=UNIT_PROBE).state == "resolved"


def test_a_metrics_tick_evaluates_every_engine(engines):
    rule_update(key=UNIT_PROBE, enabled=True)
    polled = [(engines[0], {"unit": {**UNIT, "Restart": "on-failure"}}), (engines[1], None), (engines[2], reading(1))]
    evaluate_polled(polled)
    assert open_events() == {(UNIT_PROBE, "vllm-main.service"): "firing"}
    assert RuleState.objects.filter(rule="prefix_cache_drop", subject="vllm-two").exists()
    assert evaluate_polled([]) == []  # an empty tick is fine


def remembered(memory, engines, cycle, **unit):
    return evaluate_many(
        "engine_polled", [{"engine": e, "reading": reading(cycle, **unit)} for e in engines], memory=memory
    )


def test_a_pollers_remembering_evaluations_read_each_tick_only_the_open_events(engines):
    memory = Memory()
    memory.open_ttl_s = 0.0  # every call is a new tick
    remembered(memory, engines, 1)  # first sight: rows, memories read; the new memories written at once
    assert RuleState.objects.filter(rule="prefix_cache_drop").count() == 3
    second = queries(lambda: remembered(memory, engines, 2))
    assert len(second) == 1 and "alerts_alertevent" in second[0], second  # only the open events
    # The memories moved in this process; the database gets them every STATES_SAVE_S.
    stored = {s.subject: len(s.data["samples"]) for s in RuleState.objects.filter(rule="prefix_cache_drop")}
    assert stored == {e.name: 1 for e in engines}
    memory.states_save_s = 0.0
    third = queries(lambda: remembered(memory, engines, 3))
    assert sum(q.startswith("INSERT") for q in third) == 1  # every unsaved memory in one upsert
    stored = {s.subject: len(s.data["samples"]) for s in RuleState.objects.filter(rule="prefix_cache_drop")}
    assert stored == {e.name: 3 for e in engines}


def test_remembering_evaluations_see_a_rule_edit_and_an_event_resolved_elsewhere(engines):
    memory = Memory()
    memory.open_ttl_s = 0.0
    rule_update(key=UNIT_PROBE, enabled=True)
    remembered(memory, engines[:1], 1, Restart="no")
    assert open_events() == {(UNIT_PROBE, "vllm-main.service"): "firing"}
    # Someone resolves it by hand (another process): the next tick reads the open events again and re-opens it.
    AlertEvent.objects.filter(rule=UNIT_PROBE).update(state="resolved")
    remembered(memory, engines[:1], 2, Restart="no")
    assert open_events() == {(UNIT_PROBE, "vllm-main.service"): "firing"}
    # The rule switched off (on the web) applies once the remembered rows age out.
    rule_update(key=UNIT_PROBE, enabled=False)
    remembered(memory, engines[:1], 3, Restart="no")
    assert open_events() == {(UNIT_PROBE, "vllm-main.service"): "firing"}  # rows still remembered
    memory.config_ttl_s = 0.0
    remembered(memory, engines[:1], 4, Restart="no")
    assert open_events() == {}
