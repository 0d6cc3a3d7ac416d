"""llama.cpp llama-server: /health (503 while loading), /metrics, /slots, /props, /v1/models.
Names: docs/engines.md §2. KV usage is not exported upstream; it is approximated from /slots."""

from collections.abc import Mapping
from typing import Any, ClassVar

from dashboard import http
from sparkops.collectors import prom
from sparkops.collectors.base import Answer, EngineCollector, Snapshot, answered, as_int, describe, register

FAMILIES = (
    "llamacpp:prompt_tokens",
    "llamacpp:prompt_tokens_cached",
    "llamacpp:tokens_predicted",
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
    "llamacpp:spec_decode_num_draft_tokens",
    "llamacpp:spec_decode_num_accepted_tokens",
    "llamacpp:kv_cache_usage_ratio",
)
NAMES = prom.wanted_names(FAMILIES)


def slots_usage(slots: object) -> float | None:
    """Σ tokens held by busy slots / Σ slot n_ctx — an approximation, not llama.cpp's own figure."""
    if not isinstance(slots, list) or not slots:
        return None
    held, capacity = 0, 0
    for slot in slots:
        if not isinstance(slot, dict):
            return None
        capacity += as_int(slot.get("n_ctx")) or 0
        if slot.get("is_processing"):
            nxt = slot.get("next_token")
            nxt = nxt[0] if isinstance(nxt, list) and nxt else nxt
            decoded = as_int(nxt.get("n_decoded")) if isinstance(nxt, dict) else 0
            held += (as_int(slot.get("n_prompt_tokens")) or 0) + (decoded or 0)
    return min(held / capacity, 1.0) if capacity else None


def props_kv(props: object) -> dict[str, int | None]:
    if not isinstance(props, dict):
        return {}
    settings = props.get("default_generation_settings") or {}
    n_ctx = as_int(settings.get("n_ctx")) if isinstance(settings, dict) else None
    slots = as_int(props.get("total_slots"))
    # Without --kv-unified each slot owns n_ctx tokens; with it this over-counts (docs/engines.md §2.3).
    return {"window": n_ctx, "pool_tokens": n_ctx * slots if n_ctx and slots else None}


@register
class LlamaCppCollector(EngineCollector):
    kind = "llamacpp"
    liveness_path = "/health"
    endpoints: ClassVar[dict[str, str]] = {
        "health": "/health",
        "metrics": "/metrics",
        "slots": "/slots",
        "props": "/props",
        "models": "/v1/models",
    }
    required = ("health",)
    slow = frozenset({"props", "models"})
    one_connection = True  # cpp-httplib: a thread per kept-alive connection (EngineCollector._in_turn)
    probe_ok_statuses = frozenset({503})

    def ok_statuses(self, name: str) -> frozenset[int] | None:
        return self.probe_ok_statuses if name == "health" else None

    def parse(self, bodies: Mapping[str, Answer]) -> Snapshot:
        if answered(bodies, "health").status == 503:
            return Snapshot(status="loading", error="loading model (HTTP 503)")
        metrics = bodies.get("metrics")
        if isinstance(metrics, http.HttpError):
            return Snapshot(status="down", error=f"metrics: {describe(metrics)}")
        if metrics is None:
            return Snapshot(status="down", error="metrics: not asked")
        samples = prom.parse(metrics.text, NAMES, url=metrics.url)
        models, _ = self.openai_models(self.json_of(bodies, "models", {}))
        props = self.json_of(bodies, "props")
        snap = Snapshot(
            status="up", models=models, info={"build": props.get("build_info") if isinstance(props, dict) else None}
        )
        usage = prom.total(samples, "llamacpp:kv_cache_usage_ratio")  # older builds only
        snap.gauges = {
            "requests_running": prom.total(samples, "llamacpp:requests_processing"),
            "requests_waiting": prom.total(samples, "llamacpp:requests_deferred"),
            "kv_cache_usage": usage if usage is not None else slots_usage(self.json_of(bodies, "slots")),
        }
        processed = prom.total(samples, "llamacpp:prompt_tokens_total")
        cached = prom.total(samples, "llamacpp:prompt_tokens_cached_total")
        # prompt_tokens_total excludes cached tokens, so queries = processed + cached.
        queries = processed + cached if processed is not None and cached is not None else None
        snap.counters = {
            "prefix_cache_queries_total": queries,
            "prefix_cache_hits_total": cached,
            "prompt_tokens_total": processed,
            "generation_tokens_total": prom.total(samples, "llamacpp:tokens_predicted_total"),
            "spec_draft_tokens_total": prom.total(samples, "llamacpp:spec_decode_num_draft_tokens_total"),
            "spec_accepted_tokens_total": prom.total(samples, "llamacpp:spec_decode_num_accepted_tokens_total"),
        }
        snap.kv = props_kv(props)
        if self.complete(bodies):
            snap.account = self.account_of(bodies, samples)
        return snap

    def account_of(self, bodies: Mapping[str, Answer], samples: prom.Samples | None = None) -> dict[str, Any]:  # noqa: ARG002 (Collector.account_of's signature)
        """From `/props`: the context per slot, the model's alias and path, the build, the
        slots and the chat template's arguments."""
        props = self.json_of(bodies, "props") or {}
        if not isinstance(props, dict):
            return {}
        gen = props.get("default_generation_settings") or {}
        return {
            "n_ctx": gen.get("n_ctx") if isinstance(gen, dict) else None,
            "model": props.get("model_alias"),
            "model_path": props.get("model_path"),
            "build_info": props.get("build_info"),
            "total_slots": props.get("total_slots"),
            "chat_template_kwargs": props.get("chat_template_kwargs"),
        }
