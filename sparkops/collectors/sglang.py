"""SGLang: /health, /metrics (with --enable-metrics), /get_server_info. Names: docs/engines.md §3."""

from collections.abc import Mapping
from typing import Any, ClassVar

from sparkops.collectors import prom
from sparkops.collectors.base import Answer, EngineCollector, Snapshot, answered, as_float, as_int, register

FAMILIES = (
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:token_usage",
    "sglang:max_total_num_tokens",
    "sglang:cached_tokens_total",
    "sglang:prompt_tokens_total",
    "sglang:generation_tokens_total",
    "sglang:num_retracted_requests_total",
    "sglang:time_to_first_token_seconds",
    "sglang:inter_token_latency_seconds",
    "sglang:context_len",
)
NAMES = prom.wanted_names(FAMILIES)
ACCOUNT_KEYS = (  # what /get_server_info says that a launch configuration is versioned by
    "model_path",
    "served_model_name",
    "context_length",
    "mem_fraction_static",
    "max_total_num_tokens",
    "kv_cache_dtype",
    "max_running_requests",
    "chunked_prefill_size",
    "version",
    "tp_size",
)


def info_facts(info: object) -> tuple[list[str], dict[str, Any]]:
    if not isinstance(info, dict):
        return [], {}
    name = info.get("served_model_name") or info.get("model_path")
    return ([str(name)] if name else []), {
        "memory_share": as_float(info.get("mem_fraction_static")),
        "window": as_int(info.get("context_length")),
        "pool_tokens": as_int(info.get("max_total_num_tokens")),
        "version": info.get("version"),
    }


@register
class SglangCollector(EngineCollector):
    kind = "sglang"
    liveness_path = "/health"
    endpoints: ClassVar[dict[str, str]] = {"health": "/health", "metrics": "/metrics", "info": "/get_server_info"}
    required = ("health", "metrics")
    slow = frozenset({"info"})

    def parse(self, bodies: Mapping[str, Answer]) -> Snapshot:
        metrics = answered(bodies, "metrics")
        samples = prom.parse(metrics.text, NAMES, url=metrics.url)
        models, facts = info_facts(self.json_of(bodies, "info"))
        snap = Snapshot(status="up", models=models, info={"version": facts.pop("version", None)})
        snap.gauges = {
            "requests_running": prom.total(samples, "sglang:num_running_reqs"),
            "requests_waiting": prom.total(samples, "sglang:num_queue_reqs"),
            "kv_cache_usage": prom.total(samples, "sglang:token_usage"),
        }
        prompt = prom.total(samples, "sglang:prompt_tokens_total")
        snap.counters = {
            # cached_tokens_total counts prompt tokens served from cache, so queries = prompt tokens.
            "prefix_cache_queries_total": prompt,
            "prefix_cache_hits_total": prom.total(samples, "sglang:cached_tokens_total"),
            "prompt_tokens_total": prompt,
            "generation_tokens_total": prom.total(samples, "sglang:generation_tokens_total"),
            "preemptions_total": prom.total(samples, "sglang:num_retracted_requests_total"),
        }
        snap.hists = {
            "ttft": prom.buckets(samples, "sglang:time_to_first_token_seconds"),
            "itl": prom.buckets(samples, "sglang:inter_token_latency_seconds"),
        }
        pool = prom.total(samples, "sglang:max_total_num_tokens")
        window = prom.total(samples, "sglang:context_len")
        snap.kv = {
            **facts,
            "pool_tokens": int(pool) if pool else facts.get("pool_tokens"),
            "window": int(window) if window else facts.get("window"),
        }
        if self.complete(bodies):
            snap.account = self.account_of(bodies, samples)
        return snap

    def account_of(self, bodies: Mapping[str, Answer], samples: prom.Samples | None = None) -> dict[str, Any]:  # noqa: ARG002 (Collector.account_of's signature)
        """The launch-relevant keys of `/get_server_info`."""
        info = self.json_of(bodies, "info") or {}
        if not isinstance(info, dict):
            return {}
        return {k: info.get(k) for k in ACCOUNT_KEYS if k in info}
