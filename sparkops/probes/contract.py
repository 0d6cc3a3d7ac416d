"""The request contract: what the engine does with prompt + max_tokens over its window (an HTTP 400
with its message, or a clamp ending in finish_reason "length") and with a prompt alone over it.
36 benchmark cells were once scored as model failures that were this 400. One request per case:
this reads the protocol, not a distribution, and a case costs a prefill near the whole window."""

from __future__ import annotations

import json
import re
from typing import Any

from . import haystack
from .session import case

MARGIN = 64  # the prompt sits this far under the window; max_tokens reaches past it
OVER_MAX_TOKENS = 256
CASES = ("prompt+max_tokens", "prompt alone")
_MESSAGE = re.compile(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)')


def engine_message(error: str) -> str:
    """The engine's own words from an error text like 'HTTP 400: {"error": {"message": …}}'."""
    start = error.find("{")
    try:
        body = json.loads(error[start:]) if start >= 0 else None
    except ValueError:  # the client keeps 500 characters: the JSON may be cut short
        m = _MESSAGE.search(error)
        return m.group(1).replace('\\"', '"').replace("\\'", "'") + " …" if m else error
    err = body.get("error", body) if isinstance(body, dict) else None
    message = (err.get("message") or err.get("detail")) if isinstance(err, dict) else err
    return message if isinstance(message, str) and message else error


def behaviour(result, max_tokens) -> tuple[str, dict]:
    """(what happened, detail): rejected | clamped | accepted | error."""
    if result.status in (400, 413, 422):
        return "rejected", {"http_status": result.status, "message": engine_message(result.error)}
    # The window cut the answer before anything visible (a few byte or reasoning tokens): still a clamp.
    cut = result.bucket == "empty" and result.finish_reason == "length"
    if result.bucket is not None and not cut:
        return "error", {"bucket": result.bucket, "message": result.error}
    n = (result.usage or {}).get("completion_tokens")
    if result.finish_reason == "length" and (cut or (isinstance(n, int) and n < max_tokens)):
        return "clamped", {"completion_tokens": n, "finish_reason": "length"}
    return "accepted", {"completion_tokens": n, "finish_reason": result.finish_reason}


class ContractProbe:
    def __init__(self, spec, session, salt):
        self.spec, self.session, self.salt = spec, session, salt
        self.window = None
        self.prompts: dict[str, tuple[str, int]] = {}

    @property
    def total(self):
        return len(CASES)

    async def prepare(self, window):
        if not window:
            return "the engine's window is not known (vLLM max_model_len, llama.cpp n_ctx): nothing to probe against"
        self.window = window
        units = haystack.sentences(haystack.load(self.spec.corpus))
        for name, target in (("prompt+max_tokens", window - MARGIN), ("prompt alone", window + MARGIN)):
            n, counted = await haystack.calibrate(
                self.session.count, units, target, lambda k, u=units: "Summarise this text.\n\n" + haystack.build(u, k)
            )
            self.prompts[name] = ("Summarise this text.\n\n" + haystack.build(units, n), counted)
        return None

    def jobs(self):
        for name in CASES:
            yield self._job(name)

    def _job(self, name):
        async def run():
            text, counted = self.prompts[name]
            max_tokens = OVER_MAX_TOKENS if name == "prompt+max_tokens" else 16
            # ignore_eos: the answer must run into the window's end, not stop on its own before it
            extra = {"ignore_eos": True}
            result = await self.session.send([{"role": "user", "content": text}], max_tokens=max_tokens, extra=extra)
            what, detail = behaviour(result, max_tokens)
            detail.update(case=name, window=self.window, prompt_tokens_counted=counted, max_tokens=max_tokens)
            return case(result, label=name, verdict=what, detail=detail)

        return run

    def summarize(self, cases):
        by = {c["label"]: c for c in cases}
        out: dict[str, Any] = {"kind": "contract", "window": self.window, "cases": {}}
        for name in CASES:
            c = by.get(name)
            if c:
                out["cases"][name] = {"behaviour": c["verdict"], **c["detail"]}
        over, alone = (out["cases"].get(n, {}) for n in CASES)
        out["passed"] = all(c.get("behaviour") != "error" for c in out["cases"].values())
        out["headline"] = f"prompt + max_tokens over: {_said(over)}; prompt alone over: {_said(alone)}"
        return out


def ordered(result) -> list[tuple[str, dict]]:
    """The contract's cases in the order they were sent (a JSON column may reorder the keys)."""
    cases = (result or {}).get("cases") or {}
    return [(name, cases[name]) for name in CASES if name in cases]


def _said(c):
    what = c.get("behaviour", "not measured")
    if what == "rejected":
        return f"HTTP {c.get('http_status')}"
    if what == "clamped":
        return f"clamped (finish_reason length after {c.get('completion_tokens')} tokens)"
    return what
