"""The request contract on live traffic: simulated engines publish finished requests in their
metrics and log lines in their journal; the real poller reads them over HTTP and journalctl,
the rules fire, and each alert resolves once its window holds no more of what raised it."""

import pytest

from dashboard.models import Engine
from sparkops.alerts.models import AlertEvent
from tests.polls import poll

from .conftest import wait_out_window

pytestmark = [pytest.mark.django_db(transaction=True)]


def tick(engines):
    """One poll of both engines (the host's journal too); their readings by kind."""
    rows = Engine.objects.select_related("host").filter(pk__in=[e.pk for e in engines.values()]).order_by("pk")
    return {r["kind"]: r for r in poll(*rows)}


def state(rule, subject):
    event = AlertEvent.objects.filter(rule=rule, subject=subject).order_by("-pk").first()
    return event.state if event else None


def test_length_share_fires_past_its_threshold_and_resolves(sim, engines):
    tick(engines)  # the baseline the window starts from
    sim.traffic("ctr-vllm", 18, finish_reason={"length": 1, "stop": 17})  # 5.6 %: under 10 %
    reading = tick(engines)["vllm"]["contract"]
    assert reading["requests"] == 18 and reading["finished"]["length"] == 1
    assert state("truncated_answers", "ctr-vllm") is None
    sim.traffic("ctr-vllm", 12, finish_reason={"length": 5, "stop": 7})
    reading = tick(engines)["vllm"]["contract"]
    assert reading["requests"] == 30 and reading["shares"]["length"] == pytest.approx(0.2)
    assert state("truncated_answers", "ctr-vllm") == "firing"
    event = AlertEvent.objects.get(rule="truncated_answers", subject="ctr-vllm")
    assert "20% of 30 requests" in event.message and "finish_reason length" in event.message
    wait_out_window()
    tick(engines)
    assert tick(engines)["vllm"]["contract"]["requests"] == 0
    assert state("truncated_answers", "ctr-vllm") == "resolved"


def test_repetition_and_error_fire_when_they_appear(sim, engines):
    tick(engines)
    sim.traffic("ctr-vllm", 40, finish_reason="stop")
    tick(engines)
    assert state("finished_in_error", "ctr-vllm") is None
    sim.traffic("ctr-vllm", 1, finish_reason="repetition")
    tick(engines)
    event = AlertEvent.objects.get(rule="finished_in_error", subject="ctr-vllm")
    assert event.state == "firing" and event.cause == "repetition" and "1 with repetition" in event.message
    wait_out_window()
    tick(engines)
    tick(engines)
    assert state("finished_in_error", "ctr-vllm") == "resolved"


def test_prompts_near_max_model_len_are_the_edge_of_the_window(sim, engines):
    tick(engines)
    sim.traffic("ctr-vllm", 20, prompt_tokens=1500)
    sim.traffic("ctr-vllm", 10, prompt_tokens=30000)  # over 20,000: vLLM's top bucket below 32,768
    edge = tick(engines)["vllm"]["contract"]["edge"]
    assert edge["bound_tokens"] == 20000 and edge["window_tokens"] == 32768
    assert edge["prompts"] == 30 and edge["over"] == 10
    event = AlertEvent.objects.get(rule="prompts_at_window_edge", subject="ctr-vllm")
    assert event.state == "firing" and "33% of 30 prompts were over 20,000 tokens (61% of the 32,768" in event.message
    wait_out_window()
    tick(engines)
    tick(engines)
    assert state("prompts_at_window_edge", "ctr-vllm") == "resolved"


def test_requests_cut_at_600_s_are_a_timeout_layer(sim, engines):
    tick(engines)
    sim.traffic("ctr-vllm", 2, finish_reason="abort", e2e_s=600.01)
    # two short requests ending in the same interval blur the long ones' mean by 0.15 s at most
    sim.traffic("ctr-vllm", 2, prompt_tokens=10, completion_tokens=1)
    cut = tick(engines)["vllm"]["contract"]["e2e_cut"]
    assert cut["at_s"] == 600 and cut["requests"] == 2 and 599.75 <= cut["seen_s"][0] <= 600.26
    assert state("timeout_cut", "ctr-vllm") is None  # 2 < 3
    sim.traffic("ctr-vllm", 2, finish_reason="abort", e2e_s=600.0)
    cut = tick(engines)["vllm"]["contract"]["e2e_cut"]
    assert cut["requests"] == 4 and cut["intervals"] == 2
    event = AlertEvent.objects.get(rule="timeout_cut", subject="ctr-vllm")
    assert event.state == "firing" and "4 requests ended at 600 s" in event.message
    wait_out_window()
    tick(engines)
    assert state("timeout_cut", "ctr-vllm") == "resolved"


def test_long_requests_of_varied_lengths_are_no_timeout(sim, engines):
    tick(engines)
    for seconds in (140.0, 260.0, 333.3, 700.0, 95.5, 600.0):  # each round one seen once: no cut
        sim.traffic("ctr-vllm", 1, e2e_s=seconds)
        assert tick(engines)["vllm"]["contract"]["e2e_cut"] is None
    assert state("timeout_cut", "ctr-vllm") is None


def test_peg_native_line_raises_an_alert_quoting_it(sim, engines):
    tick(engines)
    sim.traffic("ctr-llama", 1, peg_native="<think>")
    journal = tick(engines)["llamacpp"]["contract"]["journal"]
    assert journal["peg_native"] == 1 and journal["http_500"] == 1
    event = AlertEvent.objects.get(rule="peg_native_output", subject="ctr-llama")
    assert event.state == "firing"
    assert "unparsed peg-native output: <think>" in event.message and "HTTP 500" in event.message
    assert state("request_errors", "ctr-llama") is None  # one 500, under the default 3
    wait_out_window()
    tick(engines)
    assert state("peg_native_output", "ctr-llama") == "resolved"


def test_400s_and_500s_are_counted_per_engine_from_their_own_log_lines(sim, engines):
    tick(engines)
    sim.traffic("ctr-llama", 5, status=400, prompt_tokens=5000)
    sim.traffic("ctr-vllm", 2, status=400)
    sim.traffic("ctr-vllm", 3, status=500)
    readings = tick(engines)
    llama, vllm = readings["llamacpp"]["contract"]["journal"], readings["vllm"]["contract"]["journal"]
    assert (llama["http_400"], llama["http_500"]) == (5, 0)
    assert (vllm["http_400"], vllm["http_500"]) == (2, 3)
    assert "exceeds the available context size (4096 tokens)" in llama["last"]["http_400"]["message"]
    llama_event = AlertEvent.objects.get(rule="request_errors", subject="ctr-llama")
    assert llama_event.state == "firing" and llama_event.cause == "http_400"
    vllm_event = AlertEvent.objects.get(rule="request_errors", subject="ctr-vllm")
    assert vllm_event.cause == "http_500" and '"POST /v1/chat/completions HTTP/1.1" 500' in vllm_event.message
    wait_out_window()
    tick(engines)
    assert state("request_errors", "ctr-llama") == "resolved" and state("request_errors", "ctr-vllm") == "resolved"


def test_real_clients_400s_over_the_window_are_counted(sim, engines):
    import httpx

    tick(engines)
    prompt = "word " * 5000  # over llama.cpp's 4,096-token slot
    r = httpx.post(
        sim.url("ctr-llama") + "/v1/chat/completions", json={"messages": [{"role": "user", "content": prompt}]}
    )
    assert r.status_code == 400
    big = "word " * 33000  # over vLLM's 32,768-token window even without output tokens
    r = httpx.post(sim.url("ctr-vllm") + "/v1/chat/completions", json={"messages": [{"role": "user", "content": big}]})
    assert r.status_code == 400 and "exceeds this limit even without any output tokens" in r.text
    readings = tick(engines)
    assert readings["llamacpp"]["contract"]["journal"]["http_400"] == 1
    assert readings["vllm"]["contract"]["journal"]["http_400"] == 1


def test_llamacpp_has_no_finish_reason_metrics_and_says_so(sim, engines):
    tick(engines)
    sim.traffic("ctr-llama", 30, finish_reason="length")
    contract = tick(engines)["llamacpp"]["contract"]
    assert contract["metrics"] is False and "finished" not in contract
    assert state("truncated_answers", "ctr-llama") is None


def test_the_length_threshold_is_editable_like_every_rules(sim, engines):
    from django.core.management import call_command

    call_command("alerts", "rule", "truncated_answers", "--engine", "ctr-vllm", "--set", "length_pct=50")
    tick(engines)
    sim.traffic("ctr-vllm", 30, finish_reason={"length": 12, "stop": 18})  # 40 %: under the engine's 50 %
    assert tick(engines)["vllm"]["contract"]["shares"]["length"] == pytest.approx(0.4)
    assert state("truncated_answers", "ctr-vllm") is None
    sim.traffic("ctr-vllm", 20, finish_reason="length")  # 32 of 50: 64 %
    tick(engines)
    assert state("truncated_answers", "ctr-vllm") == "firing"
