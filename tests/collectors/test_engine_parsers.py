"""Each engine collector against recorded payloads of a named version."""

from dashboard import http
from sparkops.collectors import collector_for
from sparkops.collectors.derive import derive
from tests.collectors.conftest import fixture_response as fx


def vllm_bodies(metrics="0.33.0_metrics_busy.txt"):
    return {
        "health": fx("vllm", "0.33.0_version.json"),
        "metrics": fx("vllm", metrics),
        "models": fx("vllm", "0.33.0_v1_models.json"),
    }


def test_vllm_033_busy():
    snap = collector_for("vllm").snapshot(vllm_bodies())
    assert snap.status == "up" and snap.error is None
    assert snap.models == ["Qwen/Qwen3-8B"]
    assert snap.gauges == {"requests_running": 2.0, "requests_waiting": 0.0, "kv_cache_usage": 0.0412}
    assert snap.counters["prefix_cache_queries_total"] == 182744
    assert snap.counters["prefix_cache_hits_total"] == 121856
    assert snap.kv["pool_tokens"] == 766464 and snap.kv["window"] == 32768
    assert snap.kv["memory_share"] == 0.92 and snap.kv["concurrency"] == 23.39
    assert snap.hists["ttft"][float("inf")] == 300


def test_vllm_020_pool_from_blocks_times_block_size():
    snap = collector_for("vllm").snapshot(vllm_bodies("0.20.0_metrics_no_kv_tokens_label.txt"))
    assert snap.kv["pool_tokens"] == 47904 * 16


def test_vllm_rates_hit_rate_and_quantiles_from_deltas():
    coll = collector_for("vllm")
    first, state = derive(coll.snapshot(vllm_bodies()), {}, now=1000.0, name="v", kind="vllm")
    assert first["prompt_tokens_per_s"] is None  # no baseline yet
    later, state = derive(
        coll.snapshot(vllm_bodies("0.33.0_metrics_busy_later.txt")), state, now=1002.0, name="v", kind="vllm"
    )
    assert later["prompt_tokens_per_s"] == 100000 / 2.0
    assert later["generation_tokens_per_s"] == 25000 / 2.0
    assert abs(later["prefix_cache_hit_rate"] - 60928 / 91372) < 1e-9
    assert 0.05 <= later["ttft_p50_s"] <= 0.25 and later["ttft_p95_s"] >= later["ttft_p50_s"]
    assert 0.01 <= later["itl_p50_s"] <= 0.05
    assert later["restarted"] is False


def test_counter_going_down_is_a_restart_never_a_negative_rate():
    coll = collector_for("vllm")
    _, state = derive(coll.snapshot(vllm_bodies()), {}, now=1000.0, name="v", kind="vllm")
    after, state = derive(
        coll.snapshot(vllm_bodies("0.33.0_metrics_after_restart_smaller_pool.txt")),
        state,
        now=1002.0,
        name="v",
        kind="vllm",
    )
    assert after["restarted"] is True
    assert after["prompt_tokens_per_s"] is None and after["generation_tokens_per_s"] is None
    assert after["prefix_cache_hit_rate"] is None
    assert after["kv_pool_tokens"] == 524288


def test_llamacpp_real_capture():
    bodies = {
        "health": fx("llamacpp", "b0-0c1e570_health_ok.json"),
        "metrics": fx("llamacpp", "b0-0c1e570_metrics.txt"),
        "slots": fx("llamacpp", "b0-0c1e570_slots_one_busy.json"),
        "props": fx("llamacpp", "b0-0c1e570_props.json"),
        "models": fx("llamacpp", "b0-0c1e570_v1_models.json"),
    }
    snap = collector_for("llamacpp").snapshot(bodies)
    assert snap.status == "up" and snap.models == ["tiny-llama"]
    assert snap.counters["prefix_cache_hits_total"] == 309
    assert snap.counters["prefix_cache_queries_total"] == 83 + 309  # prompt_tokens_total excludes cached
    assert snap.counters["generation_tokens_total"] == 2324
    assert snap.gauges["requests_running"] == 0 and snap.gauges["requests_waiting"] == 0
    assert snap.gauges["kv_cache_usage"] == (100 + 28) / 512
    assert snap.kv == {"window": 256, "pool_tokens": 512}


def test_llamacpp_503_is_loading_not_down():
    bodies = {
        "health": fx("llamacpp", "b0-0c1e570_health_loading.json", status=503),
        "metrics": http.HttpStatus("HTTP 503", status=503),
    }
    snap = collector_for("llamacpp").snapshot(bodies)
    assert snap.status == "loading" and "loading" in snap.error.lower()


def test_sglang_0523():
    bodies = {
        "health": fx("vllm", "0.33.0_version.json"),
        "metrics": fx("sglang", "0.5.23_metrics_busy.txt"),
        "info": fx("sglang", "0.5.23_get_server_info.json"),
    }
    snap = collector_for("sglang").snapshot(bodies)
    assert snap.status == "up" and snap.models == ["qwen3-8b"]
    assert snap.gauges == {"requests_running": 4.0, "requests_waiting": 1.0, "kv_cache_usage": 0.37}
    assert snap.counters["prompt_tokens_total"] == 100000
    assert snap.counters["prefix_cache_hits_total"] == 75000
    assert snap.kv["pool_tokens"] == 412000 and snap.kv["window"] == 40960 and snap.kv["memory_share"] == 0.8


def test_openai_models_only():
    snap = collector_for("openai").snapshot({"models": fx("vllm", "0.33.0_v1_models.json")})
    assert snap.status == "up" and snap.models == ["Qwen/Qwen3-8B"] and snap.kv["window"] == 32768


def test_html_instead_of_metrics_is_down_with_reason():
    bodies = vllm_bodies()
    bodies["metrics"] = http.Response(200, {}, b"<!doctype html><html><body>login</body></html>", "x")
    snap = collector_for("vllm").snapshot(bodies)
    assert snap.status == "down" and "not Prometheus" in snap.error


def test_openai_model_list_with_odd_cards():
    body = b'{"data": [1, null, {"id": "a", "max_model_len": true}, {"id": "b", "max_model_len": "4096"}]}'
    snap = collector_for("openai").snapshot({"models": http.Response(200, {}, body, "x")})
    assert snap.status == "up" and snap.models == ["a", "b"] and snap.kv["window"] is None


def test_each_collector_gives_the_engines_account_when_it_read_the_slow_endpoints():
    """The account launch observation versions comes from the collector's own fetch: vLLM's
    models, /version and cache_config_info labels; llama.cpp's /props; SGLang's /get_server_info.
    A poll that skipped the slow endpoints has none (the last one is carried in the state)."""
    vllm = collector_for("vllm")
    account = vllm.snapshot({**vllm_bodies(), "version": fx("vllm", "0.33.0_version.json")}).account
    assert account["served_models"] == ["Qwen/Qwen3-8B"] and account["max_model_len"] == 32768
    assert account["root"] == "/models/Qwen3-8B" and account["version"] == "0.33.0"
    assert account["cache_config"]["gpu_memory_utilization"] == "0.92"
    assert vllm.snapshot({k: v for k, v in vllm_bodies().items() if k != "models"}).account is None
    llama = collector_for("llamacpp").snapshot(
        {
            "health": fx("llamacpp", "b0-0c1e570_health_ok.json"),
            "metrics": fx("llamacpp", "b0-0c1e570_metrics.txt"),
            "props": fx("llamacpp", "b0-0c1e570_props.json"),
            "models": fx("llamacpp", "b0-0c1e570_v1_models.json"),
        }
    )
    assert llama.account["n_ctx"] == 256 and llama.account["model"] == "tiny-llama"
    assert llama.account["total_slots"] == 2
    sglang = collector_for("sglang").snapshot(
        {
            "health": fx("sglang", "0.5.23_get_server_info.json"),
            "metrics": fx("sglang", "0.5.23_metrics_busy.txt"),
            "info": fx("sglang", "0.5.23_get_server_info.json"),
        }
    )
    assert sglang.account["context_length"] == 40960 and sglang.account["version"] == "0.5.23"
    assert sglang.account["mem_fraction_static"] == 0.8
    assert collector_for("openai").snapshot({"models": fx("vllm", "0.33.0_v1_models.json")}).account is None
