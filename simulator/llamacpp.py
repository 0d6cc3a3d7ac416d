"""llama.cpp llama-server-like engine (ggml-org/llama.cpp@0c1e57098, captures in
tests/fixtures/llamacpp/, names in docs/engines.md §2): 503 "Loading model" on every endpoint while loading,
unlabeled `llamacpp:*` metrics written by hand like server-task.cpp, per-slot prompt
cache (token-granular longest common prefix), `timings` on the last streamed chunk,
and the exceed_context_size_error 400 when the prompt alone fills the slot context.
"""

from __future__ import annotations

import time
import zlib
from typing import Any

from .base import request_id
from .chat import OpenAIChatEngine, dumps
from .core import EngineConfig, Plan, completion_length, prompt_words, thinking_requested
from .http import Request, Response, json_response

JSON = "application/json; charset=utf-8"
FINGERPRINT = "b0-unknown"
METRICS = (  # (name, type, help) in the order server-task.cpp writes them
    ("prompt_tokens_total", "counter", "Number of prompt tokens processed, excluding cached tokens"),
    ("prompt_tokens_cached_total", "counter", "Number of prompt tokens reused from the cache"),
    ("prompt_seconds_total", "counter", "Total time spent processing prompts"),
    ("tokens_predicted_total", "counter", "Number of generation tokens processed"),
    ("tokens_predicted_seconds_total", "counter", "Total time spent generating tokens"),
    (
        "n_decode_total",
        "counter",
        "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
    ),
    ("n_tokens_max", "counter", "Largest observed sequence length (prompt + generation)"),
    ("spec_decode_num_draft_tokens_total", "counter", "Speculative: Total draft tokens generated"),
    (
        "spec_decode_num_accepted_tokens_total",
        "counter",
        "Speculative: Total draft tokens accepted by the target model",
    ),
    ("spec_decode_num_drafts_total", "counter", "Speculative: Total speculative decoding verification steps"),
    ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s"),
    ("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s"),
    ("requests_processing", "gauge", "Number of requests processing"),
    ("requests_deferred", "gauge", "Number of requests deferred"),
    ("n_busy_slots_per_decode", "gauge", "Average number of busy slots per llama_decode() call"),
)


def llama_error(code: int, message: str, etype: str, **extra: Any) -> Response:
    return json_response({"error": {"code": code, "message": message, "type": etype, **extra}}, code, JSON)


def fmt(v) -> str:
    # C++ ostream: integers exactly, doubles with 6 significant digits
    return str(v) if isinstance(v, int) else f"{v:.6g}"


class LlamaCppEngine(OpenAIChatEngine):
    kind = "llamacpp"
    owned_by = "llamacpp"
    role_delta = b'"role":"assistant","content":null'  # llama.cpp sends null, vLLM ""
    server_header = ""
    date_header = False
    extra_headers = (("Server", "llama.cpp"), ("Access-Control-Allow-Origin", ""), ("Keep-Alive", "timeout=5, max=100"))

    def __init__(self, cfg: EngineConfig, **kw: Any) -> None:
        self.max_running = cfg.slots
        super().__init__(cfg, **kw)
        self.t_start = time.time()
        self.c: dict[str, float] = {name: 0 for name, kind, _ in METRICS if kind == "counter"}
        self.c.update(prompt_seconds_total=0.0, tokens_predicted_seconds_total=0.0)
        self.bucket: dict[str, float] = {"prompt_n": 0, "prompt_s": 0.0, "pred_n": 0, "pred_s": 0.0}
        self.slot_prompts: list[list[str]] = [[] for _ in range(cfg.slots)]
        self.slot_busy: list[int | None] = [None] * cfg.slots
        self.task_id = 0

    def stamp(self) -> str:
        us = int((time.time() - self.t_start) * 1e6)
        return f"{us // 60_000_000}.{us // 1_000_000 % 60:02d}.{us // 1000 % 1000:03d}.{us % 1000:03d}"

    def llog(self, level: str, tag: str, func: str, msg: str) -> None:
        self.log(f"{self.stamp()} {level} {tag:<4} {func:>12}: {msg}")

    def boot_log(self) -> None:
        self.llog("I", "srv", "llama_server", "initializing ...")
        self.llog("I", "srv", "load_model", f"loading model 'models/{self.cfg.model}.gguf'")
        self.llog(
            "I",
            "srv",
            "load_model",
            f"initializing, n_slots = {self.cfg.slots}, n_ctx_slot = {self.cfg.max_model_len}, kv_unified = 'false'",
        )

    def ready_log(self) -> None:
        self.llog("I", "srv", "llama_server", "model loaded")
        self.llog("I", "srv", "llama_server", f"listening on http://{self.cfg.host}:{self.cfg.port}")

    def fatal_log(self, kind: str) -> None:
        self.log("CUDA error: an illegal instruction was encountered")
        if kind == "exit0":
            self.llog("I", "srv", "operator()", "operator(): cleaning up before exit...")

    def request_error_log(self, status: int, prompt_tokens: int) -> None:
        """A request answered 400 (over the slot context) or 500, in the lines of the real
        server's log (tests/fixtures/llamacpp/; llama.cpp#27733; docs/engines.md §2.4, §2.5)."""
        self.task_id += 1
        if status == 400:
            self.llog(
                "E",
                "srv",
                "send_error",
                f"task id = {self.task_id}, error: request ({prompt_tokens} tokens) exceeds the available "
                f"context size ({self.cfg.max_model_len} tokens), try increasing it",
            )
            self.llog("W", "srv", "stop", f"cancel task, id_task = {self.task_id}")
        else:
            self.got_exception("Internal Server Error")

    def got_exception(self, message: str) -> None:
        body = dumps({"error": {"code": 500, "message": message, "type": "server_error"}}).decode()
        self.llog("W", "srv", "operator()", f"got exception: {body}")

    def peg_native_log(self, output) -> None:
        """llama.cpp#27733: the strict PEG parser refuses the finished output; the client gets a 500."""
        lines = output.splitlines() or [output]
        self.log(f"{self.stamp()} W common_chat_peg_parse: unparsed peg-native output: {lines[0]}")
        for line in lines[1:]:
            self.log(line)
        self.got_exception("The model produced output that does not match the expected peg-native format")

    def loading_response(self, req: Request) -> Response | None:
        return llama_error(503, "Loading model", "unavailable_error")

    def not_found(self, req: Request) -> Response:
        return llama_error(404, "File Not Found", "not_found_error")

    def bad_request(self, message: str) -> Response:
        return llama_error(400, message, "invalid_request_error")

    def dead_chunk(self) -> bytes:
        return (
            b"data: "
            + dumps({"error": {"code": 500, "message": "server is shutting down", "type": "server_error"}})
            + b"\n\n"
        )

    # ---- requests ----------------------------------------------------------------------
    def make_plan(self, body: dict) -> Plan | Response:
        words = prompt_words(body)
        n_ctx = self.cfg.max_model_len
        if len(words) >= n_ctx:
            self.request_error_log(400, len(words))
            return llama_error(
                400,
                f"request ({len(words)} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it",
                "exceed_context_size_error",
                n_prompt_tokens=len(words),
                n_ctx=n_ctx,
            )
        want = body.get("max_tokens", body.get("n_predict", -1))
        budget = n_ctx - len(words)  # generation stops when the slot context is full
        if isinstance(want, int) and want >= 0:
            budget = min(budget, want)
        n, finish = completion_length(body, budget, self.cfg.eos_after)
        reasoning = min(n, self.cfg.reasoning_tokens) if thinking_requested(body) else 0
        cached = self.slot_cache(words)
        opts = body.get("stream_options") or {}
        return Plan(
            len(words),
            cached,
            n,
            reasoning,
            finish,
            self.ttft(len(words), cached),
            bool(body.get("stream")),
            bool(isinstance(opts, dict) and opts.get("include_usage")),
            body,
        )

    def slot_cache(self, words: list[str]) -> int:
        """Pick the slot whose last prompt shares the longest prefix (LCP similarity)."""
        best, best_len = 0, -1
        for i, prev in enumerate(self.slot_prompts):
            n = 0
            for a, b in zip(prev, words):
                if a != b:
                    break
                n += 1
            if self.slot_busy[i] is None and n > best_len:
                best, best_len = i, n
        self.slot_prompts[best] = list(words)
        if self.fault == "cache_drop":
            return 0
        return max(0, min(best_len, len(words) - 1))  # at least one token is evaluated

    def usage(self, plan: Plan) -> dict:
        return {
            "completion_tokens": plan.completion_tokens,
            "prompt_tokens": plan.prompt_tokens,
            "total_tokens": plan.prompt_tokens + plan.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": plan.cached_tokens},
        }

    def timings(self, plan: Plan) -> dict:
        prompt_n = plan.prompt_tokens - plan.cached_tokens
        prompt_ms = max(plan.ttft, 1e-6) * 1000
        pred_ms = max(plan.completion_tokens / self.cfg.rate, 1e-6) * 1000
        return {
            "cache_n": plan.cached_tokens,
            "prompt_n": prompt_n,
            "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / max(1, prompt_n),
            "prompt_per_second": 1000 * prompt_n / prompt_ms,
            "predicted_n": plan.completion_tokens,
            "predicted_ms": pred_ms,
            "predicted_per_token_ms": pred_ms / max(1, plan.completion_tokens),
            "predicted_per_second": 1000 * plan.completion_tokens / pred_ms,
        }

    def chunk_obj(self, rid: str, created: int, choices, **extra: Any) -> dict:
        return {
            "choices": choices,
            "created": created,
            "id": rid,
            "model": self.cfg.model,
            "system_fingerprint": FINGERPRINT,
            "object": "chat.completion.chunk",
            **extra,
        }

    def chunk_templates(self, rid: str, created: int) -> tuple[bytes, bytes]:
        head = b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{'
        tail = (
            b'}}],"created":%d,"id":"%s","model":%s,"system_fingerprint":"%s","object":"chat.completion.chunk"}\n\n'
            % (created, rid.encode(), dumps(self.cfg.model), FINGERPRINT.encode())
        )
        return head, tail

    def final_chunks(self, plan: Plan, rid: str, created: int) -> bytes:
        finish = self.chunk_obj(rid, created, [{"finish_reason": plan.finish_reason, "index": 0, "delta": {}}])
        chunks = [finish]
        if plan.include_usage:
            chunks.append(self.chunk_obj(rid, created, [], usage=self.usage(plan)))
        chunks[-1]["timings"] = self.timings(plan)
        return b"".join(b"data: " + dumps(c) + b"\n\n" for c in chunks)

    def stream_headers(self) -> tuple[tuple[str, str], ...]:
        return (("X-Accel-Buffering", "no"),)

    def completion_body(self, plan: Plan) -> dict:
        message = {"role": "assistant", "content": plan.content_text()}
        if plan.reasoning_tokens:
            message["reasoning_content"] = plan.reasoning_text()
        return {
            "choices": [{"finish_reason": plan.finish_reason, "index": 0, "message": message}],
            "created": int(time.time()),
            "model": self.cfg.model,
            "system_fingerprint": FINGERPRINT,
            "object": "chat.completion",
            "usage": self.usage(plan),
            "id": request_id(),
            "timings": self.timings(plan),
        }

    async def chat(self, req: Request) -> Response | None:
        resp = await super().chat(req)
        if resp is not None and resp.content_type == "application/json":
            resp.content_type = JSON
        return resp

    async def admit(self) -> int:
        await super().admit()
        self.task_id += 1
        idx = self.slot_busy.index(None)
        self.slot_busy[idx] = self.task_id
        return idx

    def release(self, slot: int) -> None:
        self.slot_busy[slot] = None
        super().release(slot)

    def account(self, plan: Plan, *, synthetic: bool) -> None:
        c, b = self.c, self.bucket
        prompt_n = plan.prompt_tokens - plan.cached_tokens
        c["prompt_tokens_total"] += prompt_n
        c["prompt_tokens_cached_total"] += plan.cached_tokens
        c["prompt_seconds_total"] += plan.ttft
        c["tokens_predicted_total"] += plan.completion_tokens
        c["tokens_predicted_seconds_total"] += plan.completion_tokens / self.cfg.rate
        c["n_decode_total"] += plan.completion_tokens
        c["n_tokens_max"] = max(c["n_tokens_max"], plan.prompt_tokens + plan.completion_tokens - 1)
        b["prompt_n"] += prompt_n
        b["prompt_s"] += plan.ttft
        b["pred_n"] += plan.completion_tokens
        b["pred_s"] += plan.completion_tokens / self.cfg.rate

    # ---- read-only endpoints -------------------------------------------------------------
    def routes(self) -> dict:
        chat = self.chat
        return {
            ("GET", "/health"): self.health,
            ("GET", "/v1/health"): self.health,
            ("GET", "/metrics"): self.metrics,
            ("GET", "/slots"): self.slots_ep,
            ("GET", "/props"): self.props,
            ("GET", "/v1/models"): self.models,
            ("GET", "/models"): self.models,
            ("POST", "/tokenize"): self.tokenize,
            ("POST", "/v1/chat/completions"): chat,
            ("POST", "/chat/completions"): chat,
        }

    async def health(self, req: Request) -> Response:
        if self.dead:
            return llama_error(503, "server is shutting down", "unavailable_error")
        return json_response({"status": "ok"}, 200, JSON)

    async def metrics(self, req: Request) -> Response:
        b = self.bucket
        values = dict(self.c)
        values["prompt_tokens_seconds"] = round(b["prompt_n"] / b["prompt_s"], 2) if b["prompt_s"] else 0.0
        values["predicted_tokens_seconds"] = round(b["pred_n"] / b["pred_s"], 2) if b["pred_s"] else 0.0
        values["requests_processing"] = self.running + self.synthetic_running()
        values["requests_deferred"] = self.waiting
        values["n_busy_slots_per_decode"] = 1 if self.c["n_decode_total"] else 0
        self.bucket = dict.fromkeys(b, 0)  # the throughput gauges reset on every scrape
        text = "".join(
            f"# HELP llamacpp:{n} {h}\n# TYPE llamacpp:{n} {t}\nllamacpp:{n} {fmt(values[n])}\n" for n, t, h in METRICS
        )
        return Response(
            200, text.encode(), "text/plain; version=0.0.4", [("Process-Start-Time-Unix", str(int(self.t_start)))]
        )

    async def slots_ep(self, req: Request) -> Response:
        out = []
        for i, task in enumerate(self.slot_busy):
            out.append(
                {
                    "id": i,
                    "id_task": task if task is not None else -1,
                    "n_ctx": self.cfg.max_model_len,
                    "speculative": self.cfg.tokens_per_chunk > 1,
                    "is_processing": task is not None,
                    "n_prompt_tokens": len(self.slot_prompts[i]),
                    "params": {"n_predict": -1, "temperature": 0.8},
                    "next_token": [
                        {"has_next_token": task is not None, "has_new_line": False, "n_remain": -1, "n_decoded": 0}
                    ],
                }
            )
        return json_response(out, 200, JSON)

    async def props(self, req: Request) -> Response:
        return json_response(
            {
                "default_generation_settings": {
                    "params": {"n_predict": -1, "temperature": 0.8},
                    "n_ctx": self.cfg.max_model_len,
                },
                "total_slots": self.cfg.slots,
                "model_alias": self.cfg.model,
                "model_ftype": "Q4_K - Medium",
                "model_path": f"models/{self.cfg.model}.gguf",
                "modalities": {"vision": False, "video": False, "audio": False},
                "media_marker": "<__media__>",
                "endpoint_slots": True,
                "endpoint_props": False,
                "endpoint_metrics": True,
                "ui": True,
                "chat_template": "{{ messages }}",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "build_info": FINGERPRINT,
                "is_sleeping": False,
                "cors_proxy_enabled": False,
            },
            200,
            JSON,
        )

    async def models(self, req: Request) -> Response:
        m = self.cfg.model
        return json_response(
            {
                "models": [
                    {
                        "name": m,
                        "model": m,
                        "modified_at": "",
                        "size": "",
                        "digest": "",
                        "type": "model",
                        "description": "",
                        "tags": [""],
                        "capabilities": ["completion"],
                        "parameters": "",
                        "details": {
                            "parent_model": "",
                            "format": "gguf",
                            "family": "",
                            "families": [""],
                            "parameter_size": "",
                            "quantization_level": "",
                        },
                    }
                ],
                "object": "list",
                "data": [
                    {
                        "id": m,
                        "aliases": [m],
                        "tags": [],
                        "object": "model",
                        "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
                        "created": int(self.t_start),
                        "owned_by": "llamacpp",
                        "meta": {
                            "vocab_type": 2,
                            "n_vocab": 151936,
                            "n_ctx": self.cfg.max_model_len,
                            "n_ctx_train": 40960,
                            "n_embd": 4096,
                            "n_params": 8190735360,
                            "size": 5027783488,
                            "ftype": "Q4_K - Medium",
                        },
                    }
                ],
            },
            200,
            JSON,
        )

    async def tokenize(self, req: Request) -> Response:
        body = req.json()
        content = body.get("content", "") if isinstance(body, dict) else ""
        if not isinstance(content, str):
            return self.bad_request('"content" must be a string')
        return json_response({"tokens": [zlib.crc32(w.encode()) % 151_936 for w in content.split()]}, 200, JSON)
