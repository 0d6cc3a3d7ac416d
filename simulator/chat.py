"""OpenAI-style /v1/chat/completions in vLLM's wire format (also used by the SGLang-like
and plain OpenAI-compatible engines). Chunks are built from pre-rendered byte templates
so a single stream can exceed 10,000 tokens/s.
"""

from __future__ import annotations

import json
import time
from typing import Any

from . import behaviours
from .base import BaseEngine, request_id
from .core import Plan, completion_length, prompt_words, requested_max_tokens, thinking_requested
from .http import BadRequest, Request, Response, json_response

ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."


def dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


class OpenAIChatEngine(BaseEngine):
    owned_by = "vllm"
    role_delta = b'"role":"assistant","content":""'

    # ---- request -> plan ---------------------------------------------------------------
    def parse_chat(self, req: Request) -> dict:
        body = req.json()
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            raise BadRequest("'messages' must be a non-empty list")
        return body

    def window(self, prompt_n: int, max_tokens: int | None) -> tuple[int, Response | None]:
        """vLLM >= 0.32: prompt alone over the window -> 400; prompt + max_tokens over it
        is clamped silently and the request ends with finish_reason 'length'."""
        limit = self.cfg.max_model_len
        if self.cfg.over_window == "reject" and max_tokens is not None and prompt_n + max_tokens > limit:
            msg = (  # vLLM before 0.32: prompt + max_tokens over the window is refused, not clamped
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{prompt_n + max_tokens} tokens ({prompt_n} in the messages, {max_tokens} in the completion). "
                "Please reduce the length of the messages or completion."
            )
            return 0, self.error(400, msg, "BadRequestError", None)
        if max_tokens is not None and max_tokens > limit:
            msg = (
                f"max_tokens={max_tokens} cannot be greater than max_model_len={limit}. "
                f"Please request fewer output tokens. (parameter=max_tokens, value={max_tokens})"
            )
            return 0, self.error(400, msg, "BadRequestError", "max_tokens")
        if prompt_n > limit:
            msg = (
                f"This model's maximum context length is {limit} tokens. However, your prompt contains "
                f"{prompt_n} input tokens, which exceeds this limit even without any output tokens. "
                f"Please reduce the length of the input prompt. (parameter=input_tokens, value={prompt_n})"
            )
            return 0, self.error(400, msg, "BadRequestError", "input_tokens")
        room = limit - prompt_n
        return (room if max_tokens is None else min(room, max_tokens)), None

    def error(self, code: int, message: str, etype: str, param=None) -> Response:
        return json_response({"error": {"message": message, "type": etype, "param": param, "code": code}}, code)

    def make_plan(self, body: dict) -> Plan | Response:
        model = body.get("model")
        if model not in (None, self.cfg.model):
            return self.error(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
        words = prompt_words(body)
        budget, err = self.window(len(words), requested_max_tokens(body))
        if err is not None:
            return err
        n, finish = completion_length(body, budget, self.cfg.eos_after)
        reasoning = min(n, self.cfg.reasoning_tokens) if thinking_requested(body) else 0
        cached = self.cache.lookup_and_insert(words, enabled=self.fault != "cache_drop")
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

    # ---- wire format -------------------------------------------------------------------
    def usage(self, plan: Plan) -> dict:
        return {
            "prompt_tokens": plan.prompt_tokens,
            "total_tokens": plan.prompt_tokens + plan.completion_tokens,
            "completion_tokens": plan.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": plan.cached_tokens},
        }

    def chunk_templates(self, rid: str, created: int) -> tuple[bytes, bytes]:
        head = (
            b'data: {"id":"%s","object":"chat.completion.chunk","created":%d,"model":%s,"choices":[{"index":0,"delta":{'
            % (rid.encode(), created, dumps(self.cfg.model))
        )
        return head, b'},"logprobs":null,"finish_reason":null}]}\n\n'

    def envelope(self, rid: str, created: int, **extra: Any) -> dict:
        return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": self.cfg.model, **extra}

    def sse(self, obj) -> bytes:
        return b"data: " + dumps(obj) + b"\n\n"

    def dead_chunk(self) -> bytes:
        return self.sse(
            {"error": {"message": ENGINE_DEAD_MESSAGE, "type": "InternalServerError", "param": None, "code": 500}}
        )

    # ---- handlers ----------------------------------------------------------------------
    async def chat(self, req: Request) -> Response | None:
        plan = self.make_plan(self.parse_chat(req))
        if isinstance(plan, Response):
            return plan
        plan = behaviours.apply(self.cfg, plan, self.rng)
        if self.dead:
            return self.error(500, ENGINE_DEAD_MESSAGE, "InternalServerError")
        slot = await self.admit()
        self.inflight_tokens += plan.prompt_tokens + plan.completion_tokens
        try:
            t0 = time.monotonic() + plan.ttft
            return await (self.stream_chat(req, plan, t0) if plan.stream else self.full_chat(plan, t0))
        finally:
            self.inflight_tokens -= plan.prompt_tokens + plan.completion_tokens
            self.release(slot)

    async def stream_chat(self, req: Request, plan: behaviours.BehavedPlan, t0: float) -> None:
        rid, created = request_id(), int(time.time())
        head, tail = self.chunk_templates(rid, created)
        stream = await req.start_stream(headers=self.stream_headers())
        role = head + self.role_delta + tail
        first = [True]

        def chunk(i: int, n: int) -> bytes:
            out = b""
            if first[0]:
                first[0], out = False, role
            for field, lo, hi in self.split(plan, i, n):
                if field == b"tool_calls":
                    out += head + b'"tool_calls":' + plan.tool_piece(lo, hi) + tail
                    continue
                text = "".join(plan.token_text(j) for j in range(lo, hi))
                out += head + b'"%s":%s' % (field, dumps(text)) + tail
            return out

        outcome = await self.paced(stream, plan, t0, chunk, rid)
        if outcome == "dead":
            stream.send(self.dead_chunk() + b"data: [DONE]\n\n")
        elif outcome == "ok":
            stream.send(self.final_chunks(plan, rid, created) + b"data: [DONE]\n\n")
            self.account(plan, synthetic=False)
        stream.end()

    def split(self, plan: Plan, i: int, n: int):
        """Token range [i, i+n) split into reasoning_content and content parts."""
        r = plan.reasoning_tokens
        if i < r:
            yield b"reasoning_content", i, min(i + n, r)
        if i + n > r:
            yield b"tool_calls" if getattr(plan, "tool_call", None) else b"content", max(i, r), i + n

    def final_chunks(self, plan: Plan, rid: str, created: int) -> bytes:
        out = self.sse(
            self.envelope(
                rid,
                created,
                choices=[
                    {
                        "index": 0,
                        "delta": {"content": ""},
                        "logprobs": None,
                        "finish_reason": getattr(plan, "wire_finish", "") or plan.finish_reason,
                        "stop_reason": None,
                    }
                ],
            )
        )
        if plan.include_usage:
            out += self.sse(self.envelope(rid, created, choices=[], usage=self.usage(plan)))
        return out

    def stream_headers(self) -> tuple[tuple[str, str], ...]:
        return ()

    async def full_chat(self, plan: Plan, t0: float) -> Response:
        if not await self.wait_generation(plan, t0):
            return self.error(500, ENGINE_DEAD_MESSAGE, "InternalServerError")
        self.account(plan, synthetic=False)
        return json_response(self.completion_body(plan))

    def completion_body(self, plan: Plan) -> dict:
        tool = getattr(plan, "tool_call", None)
        message = {
            "role": "assistant",
            "content": None if tool else plan.content_text(),
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": [
                {"id": tool["id"], "type": "function", "function": {k: tool[k] for k in ("name", "arguments")}}
            ]
            if tool
            else [],
            "reasoning_content": plan.reasoning_text() or None,
        }
        return {
            "id": request_id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.cfg.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": getattr(plan, "wire_finish", "") or plan.finish_reason,
                    "stop_reason": None,
                }
            ],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": self.usage(plan),
            "prompt_logprobs": None,
            "kv_transfer_params": None,
        }

    async def models(self, req: Request) -> Response:
        created = int(self.started_at)
        card = {
            "id": self.cfg.model,
            "object": "model",
            "created": created,
            "owned_by": self.owned_by,
            "root": self.cfg.model,
            "parent": None,
            "max_model_len": self.cfg.max_model_len,
        }
        if self.owned_by == "vllm":
            card["permission"] = [
                {
                    "id": "modelperm-" + request_id("", 32),
                    "object": "model_permission",
                    "created": created,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ]
        return json_response({"object": "list", "data": [card]})

    def routes(self) -> dict:
        return {("GET", "/v1/models"): self.models, ("POST", "/v1/chat/completions"): self.chat}
