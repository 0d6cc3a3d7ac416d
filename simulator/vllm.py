"""vLLM-like engine (names, labels, buckets and error bodies as vLLM 0.33.0).

Metrics are produced by prometheus_client itself (one registry per engine), like vLLM,
so `_total`/`_created` families, label sorting and the exposition format are the real
library's. prompt_tokens_details is always filled, as with `--enable-prompt-tokens-details`.
"""

from __future__ import annotations

import os
import time
import zlib
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from .chat import OpenAIChatEngine
from .core import EngineConfig, Plan, prompt_words
from .http import Request, Response, json_response

VERSION = "0.33.0"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LABELS = ["model_name", "engine"]
TTFT_BUCKETS = [
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
]
ITL_BUCKETS = [
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
]
E2E_BUCKETS = [
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
]
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
STATUS_PHRASES = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}


def buckets_1_2_5(max_value: int) -> list[float]:
    """vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to max_value (the token histograms)."""
    out: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return [float(v) for v in out]
            out.append(value)
        exponent += 1


class VLLMMetrics:
    def __init__(self, cfg: EngineConfig) -> None:
        r = self.registry = CollectorRegistry()
        if cfg.process_metrics:
            ProcessCollector(registry=r), PlatformCollector(registry=r), GCCollector(registry=r)
        lv = (cfg.model, "0")

        def g(name: str, doc: str):
            return Gauge(name, doc, LABELS, registry=r).labels(*lv)

        def c(name: str, doc: str):
            return Counter(name, doc, LABELS, registry=r).labels(*lv)

        def h(name: str, doc: str, buckets):
            return Histogram(name, doc, LABELS, buckets=buckets, registry=r).labels(*lv)

        self.running = g("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = g("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_usage = g("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.cache_info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            list(cache_config_labels(cfg)),
            registry=r,
        )
        self.cache_info.labels(**cache_config_labels(cfg)).set(1)
        self.queries = c("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.")
        self.hits = c("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        self.preemptions = c("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt = c("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation = c("vllm:generation_tokens", "Number of generation tokens processed.")
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*LABELS, "finished_reason"],
            registry=r,
        )
        self.success = {reason: success.labels(*lv, reason) for reason in FINISH_REASONS}
        self.ttft = h("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS)
        self.itl = h("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS)
        self.e2e = h("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", E2E_BUCKETS)
        self.prompt_tokens = h(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", buckets_1_2_5(cfg.max_model_len)
        )
        self.spec = SpecDecodeMetrics(r, lv, cfg.tokens_per_chunk - 1) if cfg.tokens_per_chunk > 1 else None


class SpecDecodeMetrics:
    """vLLM's SpecDecodingProm counters; the sim accepts every draft token."""

    def __init__(self, r, lv, k) -> None:
        self.k = k
        self.drafts = Counter(
            "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", LABELS, registry=r
        ).labels(*lv)
        self.draft_tokens = Counter(
            "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", LABELS, registry=r
        ).labels(*lv)
        self.accepted = Counter(
            "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", LABELS, registry=r
        ).labels(*lv)
        per_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            [*LABELS, "position"],
            registry=r,
        )
        self.per_pos = [per_pos.labels(*lv, str(p)) for p in range(k)]

    def observe(self, tokens: int) -> None:
        """Each step emits 1 + k tokens; the last step may be short (fewer accepted)."""
        full, rest = divmod(tokens, self.k + 1)
        steps = full + (1 if rest else 0)
        self.drafts.inc(steps)
        self.draft_tokens.inc(steps * self.k)
        self.accepted.inc(tokens - steps)
        for p, counter in enumerate(self.per_pos):
            counter.inc(full + (1 if rest - 1 > p else 0))


def cache_config_labels(cfg: EngineConfig) -> dict:
    """A realistic subset of vLLM 0.33 CacheConfig attributes (values as str(value))."""
    conc = cfg.kv_tokens / cfg.max_model_len
    return {
        "block_size": str(cfg.block_size),
        "cache_dtype": "auto",
        "calculate_kv_scales": "False",
        "cpu_offload_gb": "0",
        "enable_prefix_caching": "True",
        "engine": "0",
        "gpu_memory_utilization": str(cfg.memory_share or 0.9),
        "is_attention_free": "False",
        "kv_cache_max_concurrency": str(round(conc, 2)),
        "kv_cache_memory_bytes": "None",
        "kv_cache_size_tokens": str(cfg.kv_tokens),
        "kv_offloading_backend": "None",
        "kv_offloading_size": "None",
        "kv_sharing_fast_prefill": "False",
        "mamba_cache_dtype": "auto",
        "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": "auto",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(cfg.num_gpu_blocks),
        "num_gpu_blocks_override": "None",
        "prefix_caching_hash_algo": "sha256",
        "sliding_window": "None",
        "swap_space": "4",
    }


class VLLMEngine(OpenAIChatEngine):
    kind = "vllm"
    listen_while_loading = False  # connection refused until the engine is built

    def __init__(self, cfg: EngineConfig, **kw: Any) -> None:
        super().__init__(cfg, **kw)
        self.m = VLLMMetrics(cfg)

    def vlog(self, msg: str, level="INFO", where="api_server.py:1", proc="APIServer") -> None:
        stamp = time.strftime("%m-%d %H:%M:%S")
        self.log(f"({proc} pid={os.getpid()}) {level} {stamp} [{where}] {msg}")

    def boot_log(self) -> None:
        self.vlog(f"vLLM API server version {VERSION}", where="utils.py:299")
        self.vlog(
            f"Loading model {self.cfg.model} (simulated, {self.cfg.load_seconds:.1f} s)",
            where="gpu_model_runner.py:2602",
            proc="EngineCore",
        )
        self.vlog(
            f"Available KV cache memory: {self.cfg.kv_tokens / self.cfg.kv_tokens_per_gib:.2f} GiB",
            where="gpu_worker.py:298",
            proc="EngineCore",
        )
        conc = self.cfg.kv_tokens / self.cfg.max_model_len
        self.vlog(
            f"GPU KV cache size: {self.cfg.kv_tokens:,} tokens, Maximum concurrency for "
            f"{self.cfg.max_model_len:,} tokens per request: {conc:.2f}x",
            where="kv_cache_utils.py:1146",
            proc="EngineCore",
        )

    def ready_log(self) -> None:
        self.vlog(f"Starting vLLM API server 0 on http://{self.cfg.host}:{self.cfg.port}", where="launcher.py:37")
        self.vlog("Available routes are:", where="launcher.py:45")
        self.log("INFO:     Application startup complete.")

    def fatal_log(self, kind: str) -> None:
        self.vlog("EngineCore encountered a fatal error.", level="ERROR", where="core.py:708", proc="EngineCore")
        self.log("RuntimeError: CUDA error: an illegal instruction was encountered")
        if kind == "exit0":
            self.vlog(
                "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup",
                level="ERROR",
                where="core_client.py:562",
            )
            self.log("INFO:     Shutting down")
            self.log("INFO:     Application shutdown complete.")
            self.log(f"INFO:     Finished server process [{os.getpid()}]")

    def access_log(self, req: Request, resp) -> None:
        """uvicorn's access line, for the requests clients send (the polled GETs are left out, as
        --disable-access-log-for-endpoints does, so the simulated journal does not fill with them)."""
        if req.method == "POST":
            self.uvicorn_access("POST", req.path, 200 if resp is None else resp.status)

    def uvicorn_access(self, method: str, path: str, status: int) -> None:
        client = f"127.0.0.1:{self.rng.randint(32768, 60999)}"
        phrase = STATUS_PHRASES.get(status, "")
        self.log(f'INFO:     {client} - "{method} {path} HTTP/1.1" {status} {phrase}'.rstrip())

    def request_error_log(self, status: int, prompt_tokens: int) -> None:
        """A chat request answered 400 (the window) or 500, as vLLM 0.33 logs it."""
        if status == 500:
            self.vlog("Error in chat completion stream generator.", level="ERROR", where="serving_chat.py:1331")
        self.uvicorn_access("POST", "/v1/chat/completions", status)

    # ---- routes ------------------------------------------------------------------------
    def routes(self) -> dict:
        return {
            **super().routes(),
            ("GET", "/health"): self.health,
            ("GET", "/version"): self.version,
            ("GET", "/metrics"): self.metrics,
            ("POST", "/tokenize"): self.tokenize,
            ("GET", "/load"): self.load,
        }

    async def health(self, req: Request) -> Response:
        return Response(503 if self.dead else 200, b"", "application/json")

    async def version(self, req: Request) -> Response:
        return json_response({"version": VERSION})

    async def load(self, req: Request) -> Response:
        return json_response({"server_load": self.running + self.waiting})

    async def tokenize(self, req: Request) -> Response:
        body = req.json() or {}
        words = prompt_words(body if isinstance(body, dict) else {})
        return json_response(
            {
                "count": len(words),
                "max_model_len": self.cfg.max_model_len,
                "tokens": [zlib.crc32(w.encode()) % 151_000 for w in words],
                "token_strs": None,
            }
        )

    async def metrics(self, req: Request) -> Response:
        m = self.m
        m.running.set(self.running + self.synthetic_running())
        m.waiting.set(self.waiting)
        m.kv_usage.set(self.kv_usage())
        return Response(200, generate_latest(m.registry), CONTENT_TYPE)

    def account(self, plan: Plan, *, synthetic: bool) -> None:
        m, rate, tpc = self.m, self.cfg.rate, self.cfg.tokens_per_chunk
        m.queries.inc(plan.prompt_tokens)
        m.hits.inc(plan.cached_tokens)
        m.prompt.inc(plan.prompt_tokens)
        m.generation.inc(plan.completion_tokens)
        m.success[plan.finish_reason].inc()
        m.ttft.observe(plan.ttft)
        steps = -(-plan.completion_tokens // tpc)
        for _ in range(steps - 1):  # one inter-token latency per decode step, as vLLM
            m.itl.observe(tpc / rate)
        m.e2e.observe(plan.e2e_s if plan.e2e_s is not None else plan.ttft + plan.completion_tokens / rate)
        m.prompt_tokens.observe(plan.prompt_tokens)
        if m.spec:
            m.spec.observe(plan.completion_tokens)
