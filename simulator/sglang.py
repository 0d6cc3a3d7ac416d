"""SGLang-like engine (0.5.23 names): scheduler and tokenizer metric families with their
label sets, /health 503 while starting, /get_server_info, cache report in usage.

SGLang runs its collectors in prometheus_client's multiprocess mode, which emits no
`*_created` series, so those are dropped from the exposition here.
"""

from __future__ import annotations

import re
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .chat import OpenAIChatEngine
from .core import EngineConfig, Plan
from .http import Request, Response, json_response

VERSION = "0.5.23"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SCHED = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
TOK = ["model_name", "engine_type"]
LATENCY_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0]
ITL_BUCKETS = [
    0.002,
    0.004,
    0.006,
    0.008,
    0.01,
    0.015,
    0.02,
    0.025,
    0.03,
    0.035,
    0.04,
    0.06,
    0.08,
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
]
CREATED = re.compile(rb"^(# (HELP|TYPE) )?sglang:\S+_created[ {].*\n", re.M)


class SGLangMetrics:
    def __init__(self, cfg: EngineConfig) -> None:
        r = self.registry = CollectorRegistry()
        sv = (cfg.model, "unified", "0", "0", "0")
        tv = (cfg.model, "unified")

        def sg(name: str, doc: str):
            return Gauge(name, doc, SCHED, registry=r).labels(*sv)

        self.running = sg("sglang:num_running_reqs", "The number of running requests.")
        self.queue = sg("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
        self.gen_throughput = sg("sglang:gen_throughput", "The generation throughput (token/s).")
        self.hit_rate = sg("sglang:cache_hit_rate", "The prefix cache hit rate.")
        self.token_usage = sg("sglang:token_usage", "The token usage.")
        self.used_tokens = sg("sglang:num_used_tokens", "The number of used tokens.")
        sg("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.").set(cfg.kv_tokens)
        sg("sglang:page_size", "KV cache page size in tokens.").set(cfg.block_size)
        sg("sglang:context_len", "Maximum context length.").set(cfg.max_model_len)
        self.prompt = Counter(
            "sglang:prompt_tokens_total", "Number of prefill tokens processed.", [*TOK, "is_streaming"], registry=r
        )
        self.generation = Counter(
            "sglang:generation_tokens_total",
            "Number of generation tokens processed.",
            [*TOK, "is_streaming"],
            registry=r,
        )
        self.cached = Counter(
            "sglang:cached_tokens_total",
            "Number of cached prompt tokens by source (device/host/storage).",
            [*TOK, "cache_source"],
            registry=r,
        ).labels(*tv, "device")
        self.requests = Counter(
            "sglang:num_requests_total", "Number of requests processed.", [*TOK, "is_streaming"], registry=r
        )
        Counter("sglang:num_aborted_requests_total", "Number of requests aborted.", TOK, registry=r).labels(*tv)
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            [*TOK, "is_streaming"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            TOK,
            buckets=ITL_BUCKETS,
            registry=r,
        ).labels(*tv)
        self.e2e = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            [*TOK, "is_streaming"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tv = tv


class SGLangEngine(OpenAIChatEngine):
    kind = "sglang"
    owned_by = "sglang"

    def __init__(self, cfg: EngineConfig, **kw: Any) -> None:
        super().__init__(cfg, **kw)
        self.m = SGLangMetrics(cfg)
        self._gen_window: list[tuple[float, int]] = []

    def slog(self, msg: str) -> None:
        self.log(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {msg}")

    def boot_log(self) -> None:
        c = self.cfg
        self.slog(
            f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {c.kv_tokens}, K size: 4.50 GB, V size: 4.50 GB"
        )
        self.slog(
            f"max_total_num_tokens={c.kv_tokens}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            f"max_running_requests={self.max_running}, context_len={c.max_model_len}, available_gpu_mem=12.34 GB"
        )

    def ready_log(self) -> None:
        self.slog("The server is fired up and ready to roll!")

    def fatal_log(self, kind: str) -> None:
        self.slog("Scheduler hit an exception: RuntimeError: CUDA error: an illegal instruction was encountered")

    def loading_response(self, req: Request) -> Response | None:
        if req.path in ("/health", "/health_generate"):
            return Response(503, b"", "application/json")
        return None

    def routes(self) -> dict:
        return {
            **super().routes(),
            ("GET", "/health"): self.health,
            ("GET", "/health_generate"): self.health,
            ("GET", "/metrics"): self.metrics,
            ("GET", "/get_server_info"): self.server_info,
            ("GET", "/server_info"): self.server_info,
            ("GET", "/get_model_info"): self.model_info,
            ("GET", "/model_info"): self.model_info,
        }

    async def health(self, req: Request) -> Response:
        return Response(503 if self.dead else 200, b"", "application/json")

    def gen_throughput(self) -> float:
        now = time.monotonic()
        self._gen_window = [(t, n) for t, n in self._gen_window if t > now - 10]
        return sum(n for _, n in self._gen_window) / 10.0

    async def metrics(self, req: Request) -> Response:
        m = self.m
        m.running.set(self.running + self.synthetic_running())
        m.queue.set(self.waiting)
        usage = self.kv_usage()
        m.token_usage.set(round(usage, 2))
        m.used_tokens.set(int(usage * self.cfg.kv_tokens))
        m.gen_throughput.set(self.gen_throughput())
        return Response(200, CREATED.sub(b"", generate_latest(m.registry)), CONTENT_TYPE)

    def account(self, plan: Plan, *, synthetic: bool) -> None:
        m, s = self.m, str(plan.stream).lower()
        m.prompt.labels(*m.tv, s).inc(plan.prompt_tokens)
        m.generation.labels(*m.tv, s).inc(plan.completion_tokens)
        m.cached.inc(plan.cached_tokens)
        m.requests.labels(*m.tv, s).inc()
        m.ttft.labels(*m.tv, s).observe(plan.ttft)
        m.e2e.labels(*m.tv, s).observe(plan.ttft + plan.completion_tokens / self.cfg.rate)
        for _ in range(plan.completion_tokens - 1):
            m.itl.observe(1 / self.cfg.rate)
        uncached = plan.prompt_tokens - plan.cached_tokens
        m.hit_rate.set(plan.cached_tokens / max(1, uncached + plan.cached_tokens))
        self._gen_window.append((time.monotonic(), plan.completion_tokens))

    async def server_info(self, req: Request) -> Response:
        c = self.cfg
        return json_response(
            {
                "model_path": c.model,
                "served_model_name": c.model,
                "host": c.host,
                "port": c.port,
                "context_length": c.max_model_len,
                "mem_fraction_static": c.memory_share or 0.9,
                "page_size": c.block_size,
                "enable_metrics": True,
                "enable_cache_report": True,
                "launch_command": f"python -m sglang.launch_server --model-path {c.model}",
                "status": "UnHealthy" if self.dead else "Up",
                "max_total_num_tokens": c.kv_tokens,
                "max_req_input_len": c.max_model_len - 1,
                "startup_time": self.started_at,
                "internal_states": [
                    {
                        "last_gen_throughput": self.gen_throughput(),
                        "effective_max_running_requests_per_dp": self.max_running,
                        "memory_usage": {"weight": 16.4, "kvcache": 9.0, "token_capacity": c.kv_tokens},
                    }
                ],
                "version": VERSION,
                "frontend": "python",
            }
        )

    async def model_info(self, req: Request) -> Response:
        return json_response(
            {
                "model_path": self.cfg.model,
                "served_model_name": self.cfg.model,
                "tokenizer_path": self.cfg.model,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
            }
        )
