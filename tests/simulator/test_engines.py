"""Simulated engines speak the real protocols (names from reference/engine-sources.md)."""

import json
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def chat(url, words, **body):
    content = " ".join(words) if isinstance(words, list) else words
    return httpx.post(
        url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": content}], **body}, timeout=30
    )


def sse(resp_text):
    events = [line[6:] for line in resp_text.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_vllm_metrics_names_labels_and_content_type(engine_factory):
    e = engine_factory(kind="vllm", name="m", rate=2000, tokens_per_chunk=3)
    chat(e.url, ["w"] * 40, max_tokens=9)
    r = httpx.get(e.url + "/metrics")
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    fams = families(r.text)
    # parser strips _total from counter family names
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries",
        "vllm:prefix_cache_hits",
        "vllm:prompt_tokens",
        "vllm:generation_tokens",
        "vllm:num_preemptions",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:cache_config_info",
        "vllm:request_success",
        "vllm:spec_decode_num_drafts",
        "vllm:spec_decode_num_accepted_tokens_per_pos",
    ):
        assert name in fams, name
    gen = fams["vllm:generation_tokens"].samples[0]
    assert gen.name == "vllm:generation_tokens_total" and gen.labels == {"model_name": "Qwen/Qwen3-8B", "engine": "0"}
    assert gen.value == 9
    info = fams["vllm:cache_config_info"].samples[0].labels
    assert info["block_size"] == "16" and int(info["num_gpu_blocks"]) * 16 == int(info["kv_cache_size_tokens"])
    assert "model_name" not in info and info["engine"] == "0"
    reasons = {s.labels["finished_reason"] for s in fams["vllm:request_success"].samples if s.name.endswith("_total")}
    assert reasons == {"stop", "length", "abort", "error", "repetition"}
    ttft = {s.name for s in fams["vllm:time_to_first_token_seconds"].samples}
    assert {"vllm:time_to_first_token_seconds_bucket", "vllm:time_to_first_token_seconds_count"} <= ttft


def test_vllm_streaming_usage_prefix_cache_and_window(engine_factory):
    e = engine_factory(kind="vllm", name="s", rate=5000, max_model_len=100, block_size=16)
    prompt = [f"p{i}" for i in range(40)]
    r = chat(e.url, prompt, max_tokens=7, stream=True, stream_options={"include_usage": True})
    chunks = sse(r.text)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    usage = chunks[-1]["usage"]
    assert usage["prompt_tokens"] == 40 and usage["completion_tokens"] == 7
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    again = chat(e.url, prompt, max_tokens=3).json()["usage"]
    assert again["prompt_tokens_details"]["cached_tokens"] == 32  # two whole 16-token blocks
    salted = chat(e.url, ["salt", *prompt], max_tokens=3).json()["usage"]
    assert salted["prompt_tokens_details"]["cached_tokens"] == 0
    clamped = chat(e.url, prompt, max_tokens=90, ignore_eos=True).json()  # 40 + 90 > 100: clamp, not 400
    assert clamped["choices"][0]["finish_reason"] == "length" and clamped["usage"]["completion_tokens"] == 60
    too_long = chat(e.url, ["x"] * 101, max_tokens=1)
    assert too_long.status_code == 400
    assert too_long.json() == {
        "error": {
            "message": "This model's maximum context length is 100 tokens. However, your prompt contains 101 input tokens, "
            "which exceeds this limit even without any output tokens. Please reduce the length of the input "
            "prompt. (parameter=input_tokens, value=101)",
            "type": "BadRequestError",
            "param": "input_tokens",
            "code": 400,
        }
    }


def test_min_tokens_ignore_eos_and_reasoning(engine_factory):
    e = engine_factory(kind="vllm", name="r", rate=5000, eos_after=5, reasoning_tokens=3)
    assert chat(e.url, "hi", max_tokens=50).json()["usage"]["completion_tokens"] == 5
    body = chat(e.url, "hi", max_tokens=50, min_tokens=20, ignore_eos=True).json()
    assert body["usage"]["completion_tokens"] == 50 and body["choices"][0]["finish_reason"] == "length"
    chunks = sse(chat(e.url, "hi", max_tokens=8, stream=True, chat_template_kwargs={"enable_thinking": True}).text)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert sum("reasoning_content" in d for d in deltas) == 3


def test_llamacpp_health_loading_then_ok(engine_factory):
    e = engine_factory(kind="llamacpp", name="l", load_seconds=3600)  # loading until the test says it loaded
    r = httpx.get(e.url + "/health")
    assert r.status_code == 503
    assert r.json() == {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
    assert httpx.get(e.url + "/metrics").status_code == 503  # every endpoint while loading
    e.ready_at = time.monotonic()  # the model has loaded (instead of sleeping past a short load)
    r = httpx.get(e.url + "/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"} and r.headers["server"] == "llama.cpp"


def test_llamacpp_metrics_stream_timings_and_overflow(engine_factory, reference_dir):
    e = engine_factory(kind="llamacpp", name="l2", rate=3000, max_model_len=256, slots=2)
    chunks = sse(
        chat(
            e.url, [f"t{i}" for i in range(34)], max_tokens=16, stream=True, stream_options={"include_usage": True}
        ).text
    )
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    last = chunks[-1]
    assert last["choices"] == [] and last["usage"]["prompt_tokens"] == 34
    assert set(last["timings"]) == {
        "cache_n",
        "prompt_n",
        "prompt_ms",
        "prompt_per_token_ms",
        "prompt_per_second",
        "predicted_n",
        "predicted_ms",
        "predicted_per_token_ms",
        "predicted_per_second",
    }
    again = chat(e.url, [f"t{i}" for i in range(34)], max_tokens=4).json()
    assert again["timings"]["cache_n"] == 33 and again["usage"]["prompt_tokens_details"]["cached_tokens"] == 33
    r = httpx.get(e.url + "/metrics")
    assert r.headers["content-type"] == "text/plain; version=0.0.4"
    captured = (reference_dir / "samples/llamacpp/metrics.txt").read_text().split("\n\n", 1)[1]
    assert [ln for ln in r.text.splitlines() if ln.startswith("#")] == [
        ln for ln in captured.splitlines() if ln.startswith("#")
    ]
    assert families(r.text)["llamacpp:prompt_tokens_cached"].samples[0].value == 33
    over = chat(e.url, ["x"] * 1811, max_tokens=16)
    assert over.status_code == 400
    expected = (reference_dir / "samples/llamacpp/overflow_prompt_nonstream.txt").read_text().strip().splitlines()[-1]
    assert over.text == expected
    long_gen = chat(e.url, ["y"] * 2, max_tokens=1024, ignore_eos=True).json()  # prompt + n_predict > n_ctx: no 400
    assert long_gen["usage"]["completion_tokens"] == 254 and long_gen["choices"][0]["finish_reason"] == "length"


def test_sglang_and_openai(engine_factory):
    s = engine_factory(kind="sglang", name="g")
    chat(s.url, "a b c", max_tokens=2)
    fams = families(httpx.get(s.url + "/metrics").text)
    running = fams["sglang:num_running_reqs"].samples[0].labels
    assert running == {
        "model_name": "Qwen/Qwen3-8B",
        "engine_type": "unified",
        "tp_rank": "0",
        "pp_rank": "0",
        "moe_ep_rank": "0",
    }
    assert "sglang:cached_tokens" in fams and "sglang:token_usage" in fams
    assert not any(n.endswith("_created") for n in fams)
    assert httpx.get(s.url + "/get_server_info").json()["max_total_num_tokens"] == 766464
    o = engine_factory(kind="openai", name="o")
    assert httpx.get(o.url + "/v1/models").json()["data"][0]["id"] == "local-model"
    assert httpx.get(o.url + "/health").status_code == 404
