"""The async side of a run: discover the engine, build the prompt to depth, warm up,
prime the prefix cache, send repetitions. No database access here (services.py drives
it with asyncio.Runner and saves between rounds)."""

from __future__ import annotations

import asyncio
from typing import Any

from dashboard import http

from .client import stream_chat
from .spec import RunSpec, depth_tolerance, new_salt

PROBE_TIMEOUT = 10.0


def tokenize_count(data):
    """The token count of a /tokenize answer: {"count": n} or {"tokens": [...]} (vLLM and llama.cpp
    both say one or the other), else None."""
    if isinstance(data, dict) and isinstance(data.get("count"), int):
        return data["count"]
    if isinstance(data, dict) and isinstance(data.get("tokens"), list):
        return len(data["tokens"])
    return None


CALIBRATION_STEPS = 6


class BenchSession:
    def __init__(self, spec: RunSpec):
        self.spec = spec
        self._client: http.AsyncClient | None = None
        self.info: dict[str, Any] = {}  # what the engine said about itself: model, version, window
        self.n_words = 0
        self.run_salt = new_salt()

    @property
    def client(self) -> http.AsyncClient:
        """The session's HTTP client, made by open(): a request before it is a bug, and says so."""
        if self._client is None:
            raise RuntimeError("BenchSession.open() was not awaited")
        return self._client

    async def open(self):
        self._client = http.async_client()
        await self.discover()
        return self

    async def close(self):
        if self._client is not None:
            await self._client.aclose()

    async def _get_json(self, path):
        try:
            resp = await http.aget(self.client, self.spec.base_url + path, timeout=PROBE_TIMEOUT)
            return resp.json()
        except http.HttpError:
            return None

    async def discover(self):
        """Model name, window and engine version, straight from the engine."""
        models = await self._get_json("/v1/models") or {}
        card = (models.get("data") or [{}])[0] if isinstance(models, dict) else {}
        card = card if isinstance(card, dict) else {}
        self.info["model"] = card.get("id")
        self.info["window"] = card.get("max_model_len") or (card.get("meta") or {}).get("n_ctx")
        if self.spec.engine_kind == "llamacpp":
            props = await self._get_json("/props") or {}
            self.info["version"] = props.get("build_info") if isinstance(props, dict) else None
        else:
            ver = await self._get_json("/version") or {}
            self.info["version"] = ver.get("version") if isinstance(ver, dict) else None
        self.spec.model = self.spec.model or self.info["model"]

    # ---- counting prompt tokens --------------------------------------------------------
    async def count_tokens(self, messages):
        """Prompt tokens as the engine counts them: /tokenize where it exists, else a
        1-token probe request read through usage.prompt_tokens."""
        count = await self._tokenize(messages)
        if count is not None:
            return count, "tokenize"
        body = self.spec.body(messages, output_tokens=1, pin=False)
        result = await stream_chat(self.client, self.spec.chat_url(), body, timeout=self.spec.timeout_s)
        prompt = (result.usage or {}).get("prompt_tokens")
        if not isinstance(prompt, int):
            raise CalibrationError(f"cannot count prompt tokens: {result.bucket or 'no usage'} {result.error}".strip())
        return prompt, "usage"

    async def _tokenize(self, messages):
        url = self.spec.base_url + "/tokenize"
        if self.spec.engine_kind == "llamacpp":
            payload = {"content": "\n".join(m["content"] for m in messages), "add_special": True}
        else:
            payload = {"messages": messages, "add_generation_prompt": True}
            if self.spec.model:
                payload["model"] = self.spec.model
        try:
            data = (await http.apost(self.client, url, json=payload, timeout=PROBE_TIMEOUT)).json()
        except http.HttpError:
            return None
        return tokenize_count(data)

    async def calibrate(self):
        """Find the filler length whose prompt lands on the asked depth (secant steps)."""
        target, tol = self.spec.depth, depth_tolerance(self.spec.depth)
        if target == 0:  # no filler: nothing to count
            self.info.update(filler_words=0, calibrated_prompt_tokens=None, counted_by=None)
            return None
        words, how = max(1, int(target * 0.75)), "tokenize"
        base, _ = await self.count_tokens(self.spec.messages(0, salt=new_salt(), turn=1))
        count = base
        for _ in range(CALIBRATION_STEPS):
            if target <= base:
                words, count = 0, base
                break
            count, how = await self.count_tokens(self.spec.messages(words, salt=new_salt(), turn=1))
            if abs(count - target) <= tol // 2:
                break
            per_word = max(1e-3, (count - base) / words)
            words = max(1, words + round((target - count) / per_word))
        self.n_words = words
        self.info.update(filler_words=words, calibrated_prompt_tokens=count, counted_by=how)
        return count

    # ---- requests ----------------------------------------------------------------------
    async def warmup(self):
        """Different content, discarded: pays for graph capture / first-request costs."""
        msgs = [{"role": "user", "content": f"[warm-up {new_salt()}] Say hello in a short sentence."}]
        body = self.spec.body(msgs, output_tokens=min(16, self.spec.output_tokens))
        result = await stream_chat(self.client, self.spec.chat_url(), body, timeout=self.spec.timeout_s)
        return result

    async def prime(self):
        """Follow-up runs: send the conversation once so its prefix is cached."""
        body = self.spec.body(self.messages(turn=0), output_tokens=2)
        return await stream_chat(self.client, self.spec.chat_url(), body, timeout=self.spec.timeout_s)

    def messages(self, *, turn):
        salt = self.run_salt if self.spec.mode == "follow_up" else new_salt()
        return self.spec.messages(self.n_words, salt=salt, turn=turn)

    async def round(self, index):
        """One repetition: `concurrency` identical-shape requests at once."""
        bodies = [self.spec.body(self.messages(turn=index * 100 + s + 1)) for s in range(self.spec.concurrency)]
        return await asyncio.gather(
            *(stream_chat(self.client, self.spec.chat_url(), b, timeout=self.spec.timeout_s) for b in bodies)
        )


class CalibrationError(Exception):
    pass
