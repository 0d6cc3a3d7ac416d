"""vLLM (V1 engine): /health, /metrics, /v1/models, /version. Names: docs/engines.md §1."""

from collections.abc import Mapping
from typing import Any, ClassVar

from sparkops.collectors import contract, prom
from sparkops.collectors.base import Answer, EngineCollector, Snapshot, answered, as_float, as_int, register

# Old names first renamed in 0.9–0.11 are read as fallbacks so an old build does not read as empty.
FAMILIES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:gpu_prefix_cache_queries",
    "vllm:gpu_prefix_cache_hits",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:num_preemptions",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:time_per_output_token_seconds",
    "vllm:cache_config_info",
)
NAMES = prom.wanted_names(FAMILIES + contract.VLLM_FAMILIES)


def _either(samples: prom.Samples, *names: str) -> float | None:
    for name in names:
        value = prom.total(samples, name)
        if value is not None:
            return value
    return None


def kv_facts(labels: prom.Labels | None) -> dict[str, float | int | None]:
    """KV pool facts from the labels of vllm:cache_config_info (label set varies by version)."""
    if not labels:
        return {}
    pool = as_int(labels.get("kv_cache_size_tokens"))
    if pool is None:
        blocks, block_size = as_int(labels.get("num_gpu_blocks")), as_int(labels.get("block_size"))
        pool = blocks * block_size if blocks and block_size else None
    return {
        "pool_tokens": pool,
        "memory_share": as_float(labels.get("gpu_memory_utilization")),
        "kv_memory_bytes": as_int(labels.get("kv_cache_memory_bytes")),
        "concurrency": as_float(labels.get("kv_cache_max_concurrency")),
    }


@register
class VllmCollector(EngineCollector):
    kind = "vllm"
    liveness_path = "/health"
    endpoints: ClassVar[dict[str, str]] = {
        "health": "/health",
        "metrics": "/metrics",
        "models": "/v1/models",
        "version": "/version",
    }
    required = ("health", "metrics")
    slow = frozenset({"models", "version"})

    def parse(self, bodies: Mapping[str, Answer]) -> Snapshot:
        metrics = answered(bodies, "metrics")
        samples = prom.parse(metrics.text, NAMES, url=metrics.url)
        models, window = self.openai_models(self.json_of(bodies, "models", {}))
        snap = Snapshot(status="up", models=models)
        snap.gauges = {
            "requests_running": prom.total(samples, "vllm:num_requests_running"),
            "requests_waiting": prom.total(samples, "vllm:num_requests_waiting"),
            "kv_cache_usage": _either(samples, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        }
        snap.counters = {
            "prefix_cache_queries_total": _either(
                samples, "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"
            ),
            "prefix_cache_hits_total": _either(
                samples, "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"
            ),
            "prompt_tokens_total": prom.total(samples, "vllm:prompt_tokens_total"),
            "generation_tokens_total": prom.total(samples, "vllm:generation_tokens_total"),
            "preemptions_total": prom.total(samples, "vllm:num_preemptions_total"),
            "spec_draft_tokens_total": prom.total(samples, "vllm:spec_decode_num_draft_tokens_total"),
            "spec_accepted_tokens_total": prom.total(samples, "vllm:spec_decode_num_accepted_tokens_total"),
        }
        itl = prom.buckets(samples, "vllm:inter_token_latency_seconds") or prom.buckets(
            samples, "vllm:time_per_output_token_seconds"
        )
        snap.hists = {"ttft": prom.buckets(samples, "vllm:time_to_first_token_seconds"), "itl": itl}
        snap.kv = {**kv_facts(prom.first_labels(samples, "vllm:cache_config_info")), "window": window}
        snap.contract = contract.vllm_metrics(samples)
        if self.complete(bodies):
            snap.account = self.account_of(bodies, samples)
        if not samples:
            snap.error = samples.why_empty("vllm:") or "no vllm:* metrics (is --disable-log-stats set?)"
        return snap

    def account_of(self, bodies: Mapping[str, Answer], samples: prom.Samples | None = None) -> dict[str, Any]:
        """The served models (LoRA adapters, which name a parent, left out), the first one's
        `max_model_len` and `root`, `/version`, and the `vllm:cache_config_info` labels."""
        models = self.json_of(bodies, "models", {})
        cards = [c for c in models.get("data") or [] if isinstance(c, dict)] if isinstance(models, dict) else []
        base_cards = [c for c in cards if not c.get("parent")]
        version = self.json_of(bodies, "version", {})
        labels = prom.first_labels(samples, "vllm:cache_config_info") if samples is not None else None
        return {
            "served_models": [c.get("id") for c in base_cards],
            "max_model_len": base_cards[0].get("max_model_len") if base_cards else None,
            "root": base_cards[0].get("root") if base_cards else None,
            "version": version.get("version") if isinstance(version, dict) else None,
            "cache_config": dict(labels or {}),
        }
