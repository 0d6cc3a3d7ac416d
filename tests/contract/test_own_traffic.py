"""The live request contract judges the operator's traffic only (issue 25, item 3): SparkOps's
own requests (benchmarks pin their output, so they end with finish_reason length) are counted by
its client as they end and subtracted from the engine's counters over the window. A real
benchmark run against the simulated vLLM, the real poller, the real rules and Redis."""

import html

import pytest
from django.urls import reverse

from dashboard.clock import db_now
from dashboard.models import Engine
from sparkops.alerts.models import AlertEvent
from sparkops.alerts.services import rule_update
from sparkops.benchmarks.services import run_create, run_execute
from sparkops.benchmarks.spec import RunSpec
from sparkops.collectors import own
from sparkops.measured.conditions import firing_alerts_during
from tests.polls import poll

pytestmark = [pytest.mark.django_db(transaction=True)]


def tick(engines):
    rows = Engine.objects.select_related("host").filter(pk__in=[e.pk for e in engines.values()]).order_by("pk")
    return {r["kind"]: r for r in poll(*rows)}["vllm"]["contract"]


def benchmark(engine, reps):
    engine.refresh_from_db()
    spec = RunSpec(
        engine_name=engine.name, engine_kind=engine.kind, base_url=engine.base_url, depth=64, output_tokens=8, reps=reps
    )
    run = run_execute(run=run_create(engine=engine, spec=spec))
    assert run.status == "done", run.reason
    return run


def truncated():
    return AlertEvent.objects.filter(rule="truncated_answers", subject="ctr-vllm").first()


@pytest.fixture
def wide_window(settings):
    settings.SPARKOPS_CONTRACT_WINDOW_S = settings.SPARKOPS_CONTRACT_CUT_WINDOW_S = 600.0
    rule_update(key="truncated_answers", params={"min_requests": 5})


def test_a_benchmark_ending_in_length_does_not_fire_but_the_operators_traffic_does(sim, engines, wide_window):
    vllm = engines["vllm"]
    tick(engines)  # the window's start, and the engine's window for the benchmark's preflight
    start = db_now()
    run = benchmark(vllm, reps=7)
    reading = tick(engines)
    sent = reading["own"]["excluded"]
    assert sent >= 7 and reading["own"]["finished"].get("length") == sent  # pinned output: all length
    assert reading["own"]["judged"] and reading["requests"] == 0 and reading["finished"]["length"] == 0
    assert truncated() is None
    # The operator's own requests, with the same share of length, fire it, and say whose they were.
    sim.traffic("ctr-vllm", int(sent), finish_reason="length")
    reading = tick(engines)
    assert reading["requests"] == sent and reading["shares"]["length"] == 1.0
    event = truncated()
    assert event is not None and event.state == "firing"
    assert f"100% of {sent:.0f} requests" in event.message
    assert f"operator's traffic only ({sent:.0f} of SparkOps's own requests excluded)" in event.message
    # A benchmark measured while it fires is tainted by the operator's traffic, and says so.
    (taint,) = firing_alerts_during(engine=vllm, start=start, end=db_now())
    assert taint.startswith("alert truncated_answers (warning) was firing (operator's traffic only, ")
    assert run.pk  # the run itself finished before the operator's traffic


def test_it_says_when_it_cannot_tell_whose_traffic_it_is(sim, engines, wide_window, viewer_client):
    vllm = engines["vllm"]
    tick(engines)
    # SparkOps counted more length requests to this address than the engine finished (another
    # server answered behind it, or the counter missed them): it cannot tell, and does not guess.
    for _ in range(10):
        own.record(vllm.url, "length")
    sim.traffic("ctr-vllm", 6, finish_reason="length")
    reading = tick(engines)
    assert reading["own"]["judged"] is False and "less than SparkOps's own requests explain" in reading["own"]["why"]
    assert truncated() is None
    page = viewer_client.get(reverse("engine-detail", args=["ctr-vllm"])).content.decode()
    panel = html.unescape(page.split('id="contract-live"')[1].split("</section>")[0])
    assert "Whose traffic this is cannot be told" in panel


def test_the_panel_says_whose_traffic_it_judges(sim, engines, wide_window, viewer_client):
    tick(engines)
    benchmark(engines["vllm"], reps=3)
    sent = tick(engines)["own"]["excluded"]
    page = viewer_client.get(reverse("engine-detail", args=["ctr-vllm"])).content.decode()
    panel = html.unescape(page.split('id="contract-live"')[1].split("</section>")[0])
    assert f"Operator's traffic only ({sent:.0f} of SparkOps's own requests excluded)." in panel
