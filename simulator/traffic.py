"""Finished requests injected into a simulated engine, as if clients had sent them: what
the request contract on live traffic looks like in each engine's own metrics and log.

POST /_sim/traffic {"count": N, ...} on an engine (or /_sim/units/<name>/traffic on the
supervisor) accounts N requests at once:

    finish_reason   "stop" | "length" | "abort" | "error" | "repetition", or a mix
                    {"length": 3, "stop": 7} (weights; the counts are split in order)
    prompt_tokens   prompt length of each (default 1,000; e.g. near max_model_len)
    completion_tokens  generated tokens of each (default 100)
    e2e_s           end-to-end seconds of each (e.g. 600.01: a timeout layer cut them;
                    vLLM then counts them as finished_reason "abort")
    status          200 (default) | 400 | 500: the HTTP status the client got. 400 and 500
                    are logged, as the engine logs them, and counted in no finish reason
    peg_native      llama.cpp only: the unparsed output llama.cpp#27733 logs before the 500

Each engine kind writes its own metrics (vLLM's request_success / request_prompt_tokens /
e2e histogram; llama.cpp has none of these) and its own log lines (uvicorn's access line
for vLLM; send_error / got exception / common_chat_peg_parse for llama.cpp)."""

from __future__ import annotations

from .core import Plan
from .http import BadRequest

FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
MAX_COUNT = 10_000


def parse(body) -> dict:
    """The knobs of one injection, checked; BadRequest says what is wrong."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    unknown = sorted(
        set(body) - {"count", "finish_reason", "prompt_tokens", "completion_tokens", "e2e_s", "status", "peg_native"}
    )
    if unknown:
        raise BadRequest(f"unknown traffic knob(s): {', '.join(unknown)}")
    count = body.get("count")
    if type(count) is not int or not 1 <= count <= MAX_COUNT:
        raise BadRequest(f"'count' must be an integer from 1 to {MAX_COUNT}")
    out = {
        "count": count,
        "mix": _mix(body.get("finish_reason", "stop")),
        "prompt_tokens": _int(body, "prompt_tokens", 1000),
        "completion_tokens": _int(body, "completion_tokens", 100),
        "e2e_s": None,
        "status": body.get("status", 200),
        "peg_native": body.get("peg_native"),
    }
    if body.get("e2e_s") is not None:
        e2e = body["e2e_s"]
        if isinstance(e2e, bool) or not isinstance(e2e, (int, float)) or not 0 < e2e <= 86400:
            raise BadRequest("'e2e_s' must be a number of seconds above 0 (at most a day)")
        out["e2e_s"] = float(e2e)
    if out["status"] not in (200, 400, 500):
        raise BadRequest("'status' must be 200, 400 or 500")
    if out["peg_native"] is not None and (not isinstance(out["peg_native"], str) or not out["peg_native"]):
        raise BadRequest("'peg_native' must be a non-empty string (the output the parser refused)")
    return out


def _mix(value) -> list[tuple[str, float]]:
    if isinstance(value, str):
        value = {value: 1}
    if not isinstance(value, dict) or not value:
        raise BadRequest("'finish_reason' must be a reason or an object {reason: weight}")
    for reason, weight in value.items():
        if reason not in FINISH_REASONS:
            raise BadRequest(f"finish reason must be one of {', '.join(FINISH_REASONS)}; got {reason!r}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            raise BadRequest(f"the weight of {reason!r} must be a number >= 0")
    if not sum(value.values()):
        raise BadRequest("the finish-reason weights add up to 0")
    return list(value.items())


def _int(body, key, default) -> int:
    value = body.get(key, default)
    if type(value) is not int or not 0 <= value <= 10_000_000:
        raise BadRequest(f"'{key}' must be a whole number of tokens")
    return value


def reasons(mix, count) -> list[str]:
    """COUNT finish reasons split by the weights of MIX (largest remainders, in order)."""
    total = sum(w for _, w in mix)
    shares = [(reason, count * w / total) for reason, w in mix]
    out = {reason: int(share) for reason, share in shares}
    left = count - sum(out.values())
    for reason, _ in sorted(shares, key=lambda s: s[1] - int(s[1]), reverse=True)[:left]:
        out[reason] += 1
    return [reason for reason, _ in mix for _ in range(out[reason])]


def inject(engine, knobs: dict) -> dict:
    """Account (or log) KNOBS' requests on ENGINE; what was done, for the caller."""
    if knobs["peg_native"] is not None and not hasattr(engine, "peg_native_log"):
        raise BadRequest(f"'peg_native' is llama.cpp's parser failure; this engine is {engine.kind}")
    n = knobs["count"]
    if knobs["peg_native"] is not None:
        for _ in range(n):
            engine.peg_native_log(knobs["peg_native"])
        return {"ok": True, "logged": n, "status": 500}
    if knobs["status"] != 200:
        if not hasattr(engine, "request_error_log"):
            raise BadRequest(f"this simulated {engine.kind} engine does not log its HTTP errors")
        for _ in range(n):
            engine.request_error_log(knobs["status"], knobs["prompt_tokens"])
        return {"ok": True, "logged": n, "status": knobs["status"]}
    finished = reasons(knobs["mix"], n)
    for reason in finished:
        completion = knobs["completion_tokens"]
        plan = Plan(
            knobs["prompt_tokens"],
            0,
            completion,
            0,
            reason,
            engine.ttft(knobs["prompt_tokens"], 0),
            False,
            False,
            e2e_s=knobs["e2e_s"],
        )
        engine.account(plan, synthetic=True)
    return {"ok": True, "accounted": n, "finish_reasons": {r: finished.count(r) for r in dict(knobs["mix"])}}
