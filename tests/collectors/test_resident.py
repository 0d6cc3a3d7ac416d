"""The resident poller: who polls which engine, the clock, and a real poller thread against
simulated engines on 127.0.0.1 (its own database connection, so transactional tests)."""

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dashboard.models import Engine, Host, Sample
from simulator.fleet import FleetThread
from sparkops.poller.fleet import engines_due, fleet_roles
from sparkops.poller.resident import Clock, ResidentPoller
from tests.waiting import HAND_TICKED, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def three_boxes():
    now = timezone.now()
    boxes = {
        name: Host.objects.create(name=name, last_report_at=report)
        for name, report in (("a-box", now), ("b-box", now), ("remote", None))
    }
    engines = {
        name: Engine.objects.create(name=f"{name}-engine", kind="openai", url=f"http://127.0.0.1:9/{name}", host=host)
        for name, host in boxes.items()
    }
    return boxes, engines


def test_each_worker_polls_its_own_box_and_the_leader_adopts_orphans(three_boxes):
    boxes, _engines = three_boxes
    a_engines, a_leads = fleet_roles(host=boxes["a-box"])
    b_engines, b_leads = fleet_roles(host=boxes["b-box"])
    assert a_leads and not b_leads
    assert {e.name for e in a_engines} == {"a-box-engine", "remote-engine"}  # "remote" has no worker
    assert {e.name for e in b_engines} == {"b-box-engine"}


def test_a_box_whose_worker_went_quiet_is_adopted_and_given_back(three_boxes):
    boxes, _ = three_boxes
    quiet = timezone.now() - timedelta(minutes=5)
    Host.objects.filter(name="b-box").update(last_report_at=quiet)
    assert {e.name for e in fleet_roles(host=boxes["a-box"])[0]} == {"a-box-engine", "b-box-engine", "remote-engine"}
    Host.objects.filter(name="b-box").update(last_report_at=timezone.now())  # its worker is back
    assert {e.name for e in fleet_roles(host=boxes["a-box"])[0]} == {"a-box-engine", "remote-engine"}


def test_the_leader_goes_quiet_and_the_next_box_leads():
    now = timezone.now()
    Host.objects.create(name="a-box", last_report_at=now - timedelta(minutes=5))
    b_box = Host.objects.create(name="b-box", last_report_at=now)
    assert fleet_roles(host=b_box)[1]


def test_engines_due_honours_a_longer_per_engine_interval(fleet, settings):
    settings.SPARKOPS_POLL_INTERVAL = 2.0
    now = timezone.now()
    vllm, llama = fleet["vllm"], fleet["llama"]
    vllm.last_poll_at, llama.last_poll_at, llama.poll_interval_s = (
        now - timedelta(seconds=1.9),
        now - timedelta(seconds=4),
        10,
    )
    assert engines_due([vllm, llama], now=now) == [vllm]  # 1.9 s is within half a tick of 2 s; 4 s < 10 s
    llama.last_poll_at = now - timedelta(seconds=9.5)
    assert engines_due([vllm, llama], now=now) == [vllm, llama]


def test_a_clock_skips_the_ticks_a_slow_duty_overran():
    clock = Clock(2.0, 100.0)
    clock.advance(100.1)
    assert clock.next == 102.0
    clock.advance(107.3)  # the duty took 5 s: the ticks at 104 and 106 are dropped, not queued
    assert clock.next == pytest.approx(109.3)


def test_a_steady_probe_costs_no_query(fleet):
    with FleetThread(1, "vllm") as sims:
        Engine.objects.filter(pk=fleet["vllm"].pk).update(url=sims.urls[0])
        Engine.objects.filter(pk=fleet["llama"].pk).delete()
        poller = ResidentPoller("spark-1", poll_interval=HAND_TICKED, duties={})
        poller.metrics_tick()  # moves the status to up
        poller.answered.clear()  # as if the metrics answer were old: the probes below are real requests
        poller.probe_tick()  # the first probe in this process evaluates the liveness rules
        with CaptureQueriesContext(connection) as queries:
            poller.probe_tick()
        assert poller.cycles == {"metrics": 0, "probe": 0, "launch": 0, "failed": 0}  # called directly, not by run_duty
        assert Engine.objects.get(pk=fleet["vllm"].pk).status == "up"
    assert [q["sql"] for q in queries.captured_queries] == []


def test_the_poller_thread_polls_on_the_clock_and_survives_a_failing_duty(fleet):
    calls = []

    def flaky():
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise RuntimeError("boom")

    with FleetThread(1, "llamacpp") as sims:
        Engine.objects.filter(pk=fleet["llama"].pk).update(url=sims.urls[0])
        Engine.objects.filter(pk=fleet["vllm"].pk).delete()
        poller = ResidentPoller("spark-1", poll_interval=0.5, liveness_interval=0.25, duties={"flaky": (0.3, flaky)})
        poller.start()
        try:
            assert wait_for(lambda: poller.cycles["metrics"] >= 3 and len(calls) >= 3), poller.cycles
        finally:
            poller.stop()
        assert not poller.alive()
    llama = Engine.objects.get(pk=fleet["llama"].pk)
    host = Host.objects.get(name="spark-1")
    assert llama.status == "up" and llama.last_poll_at is not None
    assert host.last_report_at is not None  # the host sources were read by the same thread
    assert Sample.objects.filter(series__engine=llama).exists()
    assert poller.cycles["failed"] >= 1 and poller.cycles["flaky"] >= 2  # it raised once, then ran on
    assert poller.cycles["probe"] >= poller.cycles["metrics"]


def test_readings_are_evaluated_every_tick_and_stored_every_flush_interval(fleet):
    polled = []
    with FleetThread(1, "vllm") as sims:
        Engine.objects.filter(pk=fleet["vllm"].pk).update(url=sims.urls[0], status="up")
        Engine.objects.filter(pk=fleet["llama"].pk).delete()
        vllm = Engine.objects.get(pk=fleet["vllm"].pk)
        poller = ResidentPoller("spark-1", poll_interval=HAND_TICKED, duties={}, flush_interval=60)
        evaluate = poller.alerts.rule_rows
        poller.alerts.rule_rows = lambda keys, *a: (polled.append(keys), evaluate(keys, *a))[1]
        poller.metrics_tick()  # a poller's first tick (the engine's first reading) is stored at once
        first = Engine.objects.get(pk=vllm.pk).last_poll_at
        stored = Sample.objects.filter(series__engine=vllm).count()
        assert first is not None and stored > 0

        def due_again():  # as if the engine's interval had passed
            poller.engines[0].last_poll_at -= timedelta(seconds=5)

        due_again()
        poller.metrics_tick()  # rates need two readings: their series are new
        due_again()
        with CaptureQueriesContext(connection) as queries:
            poller.metrics_tick()
        assert len(polled) == 6  # the alerts were evaluated every tick, the host's and the engine's
        # A steady tick reads and writes nothing but the alerts' open events: the readings are held.
        assert [q["sql"] for q in queries.captured_queries if "alerts_alertevent" not in q["sql"]] == []
        assert Sample.objects.filter(series__engine=vllm).count() == stored
        assert Engine.objects.get(pk=vllm.pk).last_poll_at == first
        # The engine's metrics endpoint breaks: a status change is stored at once, with what was held.
        poller.engines[0].url = "http://127.0.0.1:9"
        due_again()
        poller.metrics_tick()
        row = Engine.objects.get(pk=vllm.pk)
        assert row.status == "down" and row.last_poll_at > first
        ups = (
            Sample.objects.filter(series__engine=vllm, series__metric="up")
            .order_by("ts")
            .values_list("value", flat=True)
        )
        assert list(ups) == [1.0, 1.0, 1.0, 0.0]
        host = Host.objects.get(name="spark-1")
        assert host.last_report_at is not None and Sample.objects.filter(series__host=host).exists()
    # What a poller held when it stops is stored.
    poller.engines[0].last_poll_at -= timedelta(seconds=5)
    poller.metrics_tick()
    held = Sample.objects.count()
    poller.stop()
    assert Sample.objects.count() > held


def test_a_worker_that_does_not_lead_skips_the_upkeep_duties(fleet):
    Host.objects.create(name="aaa-first", last_report_at=timezone.now())
    ran = []
    poller = ResidentPoller("spark-1", duties={"upkeep": (0.1, lambda: ran.append(1))})
    Engine.objects.all().delete()
    poller.metrics_tick()
    poller.run_duty("upkeep")
    assert not poller.leader and ran == []
    Host.objects.filter(name="aaa-first").delete()
    poller.roles_at -= 60  # the roles are re-read every 10 s: let that time pass
    poller.metrics_tick()
    poller.run_duty("upkeep")
    assert poller.leader and ran == [1]


def test_a_probe_right_after_a_metrics_answer_is_not_sent_but_its_liveness_is(fleet, http_server):
    from tests.collectors.test_polling import vllm_routes

    routes = vllm_routes("0.33.0_metrics_busy.txt")
    health_hits = []
    status, _body, _headers = routes["/health"]

    def health(handler):
        health_hits.append(time.monotonic())
        handler.send_response(status)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    routes["/health"] = health
    Engine.objects.filter(pk=fleet["vllm"].pk).update(url=http_server(routes))
    Engine.objects.filter(pk=fleet["llama"].pk).delete()
    # Half a 4 s interval: the tick's store, rules and live push fit in it even at load.
    poller = ResidentPoller("spark-1", poll_interval=HAND_TICKED, liveness_interval=4.0, duties={})
    poller.metrics_tick()
    polled_hits = len(health_hits)  # the metrics poll itself may read /health
    found = poller.probe_tick()  # the same tick: the engine just answered its metrics poll
    assert len(health_hits) == polled_hits and [f.status for f in found] == ["up"]
    assert poller.alerts.last_up == {fleet["vllm"].pk: True}  # and its liveness rules were evaluated
    poller.answered[fleet["vllm"].pk] -= 2.5  # the answer is now past half the interval: a real probe
    found = poller.probe_tick()
    assert len(health_hits) == polled_hits + 1 and [f.status for f in found] == ["up"]


def test_one_poller_per_box_a_second_waits_for_the_lease(settings):
    from sparkops.poller.lease import PollerLease

    settings.SPARKOPS_CHANNEL_PREFIX = f"lease-test-{time.monotonic_ns()}"
    first, second = PollerLease("spark-1"), PollerLease("spark-1")
    assert first.holds() and not second.holds()
    assert PollerLease("spark-2").holds()  # another box: its own lease
    idle = ResidentPoller("spark-1", duties={}, lease=second)
    idle.run_duty("metrics")
    assert idle.cycles["metrics"] == 0 and not Host.objects.filter(name="spark-1").exists()  # polled nothing
    first.release()
    second.checked_at -= PollerLease.RENEW_S  # it asks Redis again only every RENEW_S
    assert second.holds()
    first.checked_at -= PollerLease.RENEW_S
    assert not first.holds()  # the renewal is the holder's alone


def test_a_lease_that_cannot_reach_redis_polls_anyway():
    from sparkops.poller.lease import PollerLease

    assert PollerLease("spark-1", url="redis://127.0.0.1:1/0").holds()


def test_a_hung_engine_never_delays_the_other_engines_probes(fleet, http_server):
    """The metrics tick waits on a hung /metrics up to its timeout (1.5 s at a 2 s interval);
    the probes run on their own thread meanwhile."""
    from tests.collectors.test_polling import vllm_routes

    hung_at, health_hits = [], []

    def hang(handler):
        hung_at.append(time.monotonic())
        time.sleep(3)

    def health(handler):
        health_hits.append(time.monotonic())
        handler.send_response(200)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    hung, healthy = vllm_routes("0.33.0_metrics_busy.txt"), vllm_routes("0.33.0_metrics_busy.txt")
    hung["/metrics"], healthy["/health"] = hang, health
    Engine.objects.filter(pk=fleet["vllm"].pk).update(url=http_server(healthy))
    Engine.objects.filter(pk=fleet["llama"].pk).update(url=http_server(hung), kind="vllm")
    poller = ResidentPoller("spark-1", poll_interval=2.0, liveness_interval=0.25, duties={})

    def probed_while_a_tick_hung():
        # ~4 probes of the healthy engine fit in each 1.2 s that a tick hangs; three in one of them
        # shows the probes did not wait for the tick (a loaded machine may need a few ticks to show it)
        return any(sum(start + 0.1 < t < start + 1.3 for t in health_hits) >= 3 for start in hung_at[1:-1])

    poller.start()
    try:
        assert wait_for(probed_while_a_tick_hung, timeout=40, step=0.2), (hung_at, health_hits, poller.cycles)
    finally:
        poller.stop()


def test_a_healthy_health_does_not_overrule_garbage_metrics(fleet, http_server):
    """/health answers 200 while /metrics is HTML: the metrics poll finds the engine down with
    the reason, and the probes between metrics polls leave it down instead of flapping it up."""
    from tests.collectors.test_polling import vllm_routes

    routes = vllm_routes("0.33.0_metrics_busy.txt")
    routes["/metrics"] = (200, b"<!DOCTYPE html><html>sign in</html>", {})
    Engine.objects.filter(pk=fleet["vllm"].pk).update(url=http_server(routes))
    Engine.objects.filter(pk=fleet["llama"].pk).delete()
    poller = ResidentPoller("spark-1", poll_interval=HAND_TICKED, liveness_interval=1.0, duties={}, flush_interval=0)
    poller.metrics_tick()
    for _ in range(2):
        poller.answered.clear()
        assert [f.status for f in poller.probe_tick()] == []  # found up, kept down
    engine = Engine.objects.get(pk=fleet["vllm"].pk)
    assert engine.status == "down" and "not Prometheus" in engine.status_reason
    routes["/metrics"] = vllm_routes("0.33.0_metrics_busy.txt")["/metrics"]  # fixed: the next poll reads it up
    poller.engines[0].last_poll_at -= timedelta(seconds=5)
    poller.metrics_tick()
    poller.answered.clear()
    assert [f.status for f in poller.probe_tick()] == ["up"]
    assert Engine.objects.get(pk=fleet["vllm"].pk).status == "up"


def test_a_hung_engine_is_read_at_a_later_tick_and_never_holds_the_others(fleet, http_server, settings):
    """A tick waits FETCH_WAIT of the interval for its engines: the healthy one's reading comes
    with it; the hung one's fetch goes on (bounded by its own poll timeout) and its failed
    reading comes with a later tick."""
    from sparkops.poller.resident import FETCH_WAIT
    from tests.collectors.test_polling import vllm_routes
    from tests.holds import Hold

    settings.SPARKOPS_POLL_INTERVAL = 1.0  # poll timeout 0.75 s, the tick waits 0.4 s
    hang = Hold()  # never answers: held until the poll's timeout gives up

    Engine.objects.filter(pk=fleet["vllm"].pk).update(url=http_server(vllm_routes("0.33.0_metrics_busy.txt")))
    Engine.objects.filter(pk=fleet["llama"].pk).update(
        kind="vllm", url=http_server({"/health": hang, "/metrics": hang, "/v1/models": hang})
    )
    poller = ResidentPoller("spark-1", duties={}, flush_interval=0)
    first = {e.name: r for e, r in poller.metrics_tick().engines}
    # the tick came back without the hung engine: it did not wait out that engine's poll timeout
    # (had it, the timed-out reading would be here), only FETCH_WAIT of the interval
    assert FETCH_WAIT * 1.0 < 0.75
    assert set(first) == {"vllm-main"} and first["vllm-main"]["up"]  # the hung one is still in flight
    later = {}

    def a_later_tick_carries_it():  # once the hung fetch times out (0.75 s), the next tick has it
        poller.engines[0].last_poll_at -= timedelta(seconds=5)
        later.update({e.name: r for e, r in poller.metrics_tick().engines})
        return "llama-side" in later

    assert wait_for(a_later_tick_carries_it, timeout=20, step=0.2)
    assert later["vllm-main"]["up"] and "timed out" in later["llama-side"]["error"]
    assert Engine.objects.get(pk=fleet["llama"].pk).status == "down"
    poller.stop()


def test_a_tick_carries_the_last_launch_audit_onto_the_card(fleet, http_server):
    from sparkops.launch.observer import Observer
    from sparkops.live.cards import engine_card_html
    from tests.collectors.test_polling import vllm_routes

    Engine.objects.filter(pk=fleet["vllm"].pk).update(url=http_server(vllm_routes("0.33.0_metrics_busy.txt")))
    Engine.objects.filter(pk=fleet["llama"].pk).delete()
    poller = ResidentPoller("spark-1", poll_interval=HAND_TICKED, duties={}, flush_interval=0)
    poller.launch = Observer()
    poller.launch.failing = {fleet["vllm"].pk: 3}
    [(engine, reading)] = poller.metrics_tick().engines
    assert reading["audit_failing"] == 3 and "audit: 3 failing" in engine_card_html(engine)
    assert Engine.objects.get(pk=engine.pk).latest["audit_failing"] == 3
