"""The async side of a probe: the benchmark session (discovery, warm-up) and client, token counts
from the engine's own tokenizer, and one request read whole (content, reasoning, tool calls).
No database access here: services.py drives it with asyncio.Runner and saves each case."""

from __future__ import annotations

from dashboard import http
from sparkops.benchmarks.client import stream_chat
from sparkops.benchmarks.session import PROBE_TIMEOUT, BenchSession, tokenize_count

from .spec import ProbeSpec

MAX_TEXT = 512 * 1024  # a soak's saved text; more than any multi-thousand-token generation


class TokenizeError(Exception):
    pass


class ProbeSession:
    def __init__(self, spec: ProbeSpec):
        self.spec = spec
        self.bench = spec.bench()
        self.inner = BenchSession(self.bench)
        self.counted_by: str | None = None

    @property
    def info(self):
        return self.inner.info

    async def open(self):
        await self.inner.open()
        self.spec.model = self.bench.model
        return self

    async def close(self):
        await self.inner.close()

    async def warmup(self):
        return await self.inner.warmup()

    async def count(self, text: str) -> int:
        """Tokens of TEXT by the engine: /tokenize (llama.cpp's content form, vLLM's prompt form), else
        usage.prompt_tokens of a one-token request (which adds the chat template's few tokens)."""
        n = await self._tokenize(text)
        if n is not None:
            self.counted_by = self.counted_by or "tokenize"
            return n
        result = await self.send([{"role": "user", "content": text}], max_tokens=1)
        prompt = (result.usage or {}).get("prompt_tokens")
        if not isinstance(prompt, int):
            raise TokenizeError(f"the engine counted no tokens: {result.bucket or 'no usage'} {result.error}".strip())
        self.counted_by = "usage"
        return prompt

    async def _tokenize(self, text):
        if self.spec.engine_kind == "llamacpp":
            payload: dict = {"content": text, "add_special": False}
        else:
            payload = {"prompt": text, "add_special_tokens": False}
            if self.spec.model:
                payload["model"] = self.spec.model
        try:
            resp = await http.apost(
                self.inner.client, self.spec.base_url + "/tokenize", json=payload, timeout=PROBE_TIMEOUT
            )
            data = resp.json()
        except (http.HttpError, ValueError):
            return None
        return tokenize_count(data)

    async def send(self, messages, *, max_tokens, extra=None):
        """One streamed request with the profile's sampling and thinking (never pinned), read whole."""
        body = self.bench.body(messages, output_tokens=max_tokens, pin=False)
        body.update(extra or {})
        return await stream_chat(
            self.inner.client, self.bench.chat_url(), body, timeout=self.spec.timeout_s, keep_text=True
        )


def reasoning_count(result) -> int:
    """Reasoning tokens: the engine's usage figure when it sends one, else reasoning chunks."""
    details = (result.usage or {}).get("completion_tokens_details") or {}
    n = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return n if isinstance(n, int) and n > 0 else result.reasoning_chunks


def storable(text):
    """TEXT as PostgreSQL stores it: a broken model can emit NUL bytes, which a text column refuses."""
    return text.replace("\x00", "\ufffd") if isinstance(text, str) else text


def case(result, *, label, rep=0, verdict="", detail=None, keep_text=False):
    """A case dict (one ProbeCase row) from a StreamResult."""
    usage = result.usage or {}
    return {
        "label": label,
        "rep": rep,
        "ok": result.bucket is None,
        "bucket": result.bucket or "",
        "error": storable(result.error),
        "http_status": result.status,
        "finish_reason": result.finish_reason or "",
        "verdict": verdict,
        "detail": detail or {},
        "prompt_tokens": usage.get("prompt_tokens") if isinstance(usage.get("prompt_tokens"), int) else None,
        "completion_tokens": usage.get("completion_tokens")
        if isinstance(usage.get("completion_tokens"), int)
        else None,
        "reasoning_tokens": reasoning_count(result),
        "seconds": round(result.t_end - result.t_send, 3),
        "text": storable(result.content[:MAX_TEXT] if keep_text else result.content[:2000]),
    }
