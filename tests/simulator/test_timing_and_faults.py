"""Exact send schedule and the fault switch of a single engine."""

import contextlib
import json
import time

import httpx
import pytest

from .test_engines import chat


def stream_arrivals(url, n, **body):
    times, tokens = [], []
    payload = {
        "messages": [{"role": "user", "content": "go"}],
        "max_tokens": n,
        "ignore_eos": True,
        "stream": True,
        **body,
    }
    with httpx.stream("POST", url + "/v1/chat/completions", json=payload, timeout=30) as r:
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            now, choices = time.monotonic(), json.loads(line[6:])["choices"]
            if choices and choices[0]["delta"].get("content"):
                times.append(now)
                tokens.append(len(choices[0]["delta"]["content"].split()))
    return times, tokens


def test_sends_on_an_absolute_schedule_at_50_tokens_per_second(engine_process):
    """Each chunk is sent at t0 + i/rate (sleeping to a deadline), so lateness never accumulates.
    How close a client measures the rate is bench/harness_accuracy.py's job, not a unit test's."""
    url = engine_process(kind="vllm", name="t", rate=50, ttft=0.01)
    times, _ = stream_arrivals(url, 60)
    log = httpx.get(url + "/_sim/sendlog").json()
    sends = log["send_times"]  # same CLOCK_MONOTONIC as ours
    lateness = [t - (log["scheduled_t0"] + i / 50) for i, t in enumerate(sends)]
    assert len(sends) == 60 == len(times)
    assert min(lateness) >= 0  # never early
    # Accumulated sleeps would drift by the sum of every wake-up delay; deadlines do not.
    assert lateness[-1] < 0.05 and sorted(lateness)[len(lateness) // 2] < 0.01
    assert all(s <= t for s, t in zip(sends, times))


def test_three_tokens_per_chunk(engine_factory):
    e = engine_factory(kind="vllm", name="k", rate=300, tokens_per_chunk=3)
    _, tokens = stream_arrivals(e.url, 30)
    assert tokens == [3] * 10
    assert httpx.get(e.url + "/_sim/sendlog").json()["tokens"] == [3] * 10


def test_a_fast_stream_delivers_every_token(engine_factory):
    """20,000 tokens/s asked: every token arrives, one per chunk (the rate itself is measured by
    bench/harness_accuracy.py)."""
    e = engine_factory(kind="vllm", name="fast", rate=20000, ttft=0.0)
    times, tokens = stream_arrivals(e.url, 10000)
    assert len(times) == 10000 and sum(tokens) == 10000


def test_bad_fault_kind_is_400(engine_factory):
    e = engine_factory(kind="vllm", name="b")
    r = httpx.post(e.url + "/_sim/fault", json={"kind": "meltdown"})
    assert r.status_code == 400 and "exit0" in r.json()["error"]
    assert httpx.post(e.url + "/_sim/fault", content=b"{not json").status_code == 400
    assert httpx.get(e.url + "/_sim/state").json()["fault"] is None


def fault(e, kind, **extra):
    r = httpx.post(e.url + "/_sim/fault", json={"kind": kind, **extra})
    assert r.status_code == 200, r.text


def test_http500_garbage_slow_hang_and_clear(engine_factory):
    e = engine_factory(kind="vllm", name="f")
    fault(e, "http500")
    assert httpx.get(e.url + "/health").status_code == 500
    fault(e, "garbage_metrics")
    r = httpx.get(e.url + "/metrics")
    assert r.headers["content-type"].startswith("text/html") and b"vllm:" not in r.content
    fault(e, "slow", seconds=0.5)
    t = time.monotonic()
    assert httpx.get(e.url + "/health").status_code == 200 and time.monotonic() - t >= 0.5
    fault(e, "hang")
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(e.url + "/health", timeout=0.5)
    fault(e, "clear")
    assert httpx.get(e.url + "/health").status_code == 200


def test_cache_drop_stops_hits_while_queries_grow(engine_factory):
    e = engine_factory(kind="vllm", name="c", rate=5000)
    prompt = [f"w{i}" for i in range(64)]
    chat(e.url, prompt, max_tokens=1)
    assert chat(e.url, prompt, max_tokens=1).json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 48
    fault(e, "cache_drop")
    assert chat(e.url, prompt, max_tokens=1).json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    text = httpx.get(e.url + "/metrics").text
    assert 'vllm:prefix_cache_hits_total{engine="0",model_name="Qwen/Qwen3-8B"} 48.0' in text
    assert 'vllm:prefix_cache_queries_total{engine="0",model_name="Qwen/Qwen3-8B"} 192.0' in text


def test_exit0_ends_inflight_stream_with_vllm_error_chunk(engine_factory):
    e = engine_factory(kind="vllm", name="d", rate=20, exit_delay=0.5)
    payload = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 200, "ignore_eos": True, "stream": True}
    lines = []
    with httpx.stream("POST", e.url + "/v1/chat/completions", json=payload, timeout=10) as r:
        for line in r.iter_lines():
            lines.append(line)
            if len(lines) == 6:
                httpx.post(e.url + "/_sim/fault", json={"kind": "exit0"})
    data = [ln for ln in lines if ln.startswith("data: ")]
    assert data[-1] == "data: [DONE]"
    err = json.loads(data[-2][6:])["error"]
    assert err["code"] == 500
    # Dying: not ready, never 200. A loaded run may stream the last lines past exit_delay: then it is gone
    # already, refusing the connection (its exit is checked below).
    with contextlib.suppress(httpx.ConnectError):
        assert httpx.get(e.url + "/health").status_code == 503
    deadline = time.monotonic() + 5  # the process "exits" exit_delay after the fault
    while not e.exit_code.done() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert e.exit_code.done() and e.exit_code.result() == 0
