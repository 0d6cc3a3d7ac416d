"""The streaming benchmark client: one chat request, every SSE chunk time-stamped.

Timestamps are `time.monotonic()` taken right after each network read, so every event
that arrived in that read shares its arrival time. Nothing here touches the database:
a `StreamResult` is plain data and `measure()` turns it into the figures docs/benchmarks.md
defines. Failures are classified into buckets and never become speed figures.

HTTP goes through the project's choke point (dashboard/http.py): explicit timeouts,
typed errors."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from dataclasses import asdict, dataclass, field

from dashboard import http
from sparkops.collectors import own

BUCKETS = ("capacity", "overload", "server_error", "timeout", "disconnect", "malformed", "truncated", "empty")
# Message shapes of "prompt + output over the window" in vLLM 0.9–0.33 and llama.cpp (docs/engines.md §1.6, §2.4).
_CAPACITY = re.compile(
    r"maximum context length|exceed_context_size|exceeds the available context|context size|"
    r"cannot be greater than max_model_len|max_tokens' or 'max_completion_tokens' is too large|"
    r"parameter=input_tokens|larger than the max context",
    re.I,
)
MAX_ERROR_TEXT = 500


@dataclass
class StreamResult:
    """What came back for one request, before interpretation."""

    t_send: float = 0.0  # monotonic, just before the request left
    t_end: float = 0.0
    status: int | None = None
    chunk_times: list = field(default_factory=list)  # arrival of each token-bearing chunk
    t_first_answer: float | None = None  # first content (not reasoning) token
    reasoning_chunks: int = 0
    content_chars: int = 0
    finish_reason: str | None = None
    usage: dict | None = None
    timings: dict | None = None
    done: bool = False  # saw "data: [DONE]"
    bucket: str | None = None
    error: str = ""
    # keep_text (the quality probes): the answer itself, not only its timing
    keep_text: bool = False
    content_parts: list = field(default_factory=list)
    reasoning_parts: list = field(default_factory=list)
    content_ends: list = field(default_factory=list)  # content length after each content chunk
    tool_calls: dict = field(default_factory=dict)  # index -> {"id", "name", "arguments"}

    @property
    def content(self) -> str:
        return "".join(self.content_parts)

    @property
    def reasoning(self) -> str:
        return "".join(self.reasoning_parts)

    def fail(self, bucket, message):
        if self.bucket is None:
            self.bucket, self.error = bucket, str(message)[:MAX_ERROR_TEXT]
        return self


def classify_status(status, text):
    """Bucket of an HTTP error answer."""
    if status in (429, 503):
        return "overload"
    if status in (400, 413, 422) and _CAPACITY.search(text or ""):
        return "capacity"
    return "server_error"


def _delta_kinds(obj):
    """(has_token, is_answer, is_reasoning) of one chunk object."""
    token = answer = reasoning = False
    for choice in obj.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content"):
            token = answer = True
        if delta.get("reasoning_content") or delta.get("reasoning"):
            token = reasoning = True
        if delta.get("tool_calls"):
            token = answer = True
    return token, answer, reasoning


class SSEParser:
    """Incremental SSE parser; `feed()` returns the data payloads completed by a read."""

    def __init__(self):
        self.buf = b""

    def feed(self, data: bytes):
        self.buf += data
        if b"\r" in self.buf:
            self.buf = self.buf.replace(b"\r\n", b"\n")
        *events, self.buf = self.buf.split(b"\n\n")
        out = []
        for event in events:
            lines = [ln[5:].lstrip(b" ") for ln in event.split(b"\n") if ln.startswith(b"data:")]
            if lines:
                out.append(b"\n".join(lines))
        return out


def _apply(result: StreamResult, payload: bytes, now: float):
    """Fold one SSE data payload into the result; returns False to stop reading."""
    if payload == b"[DONE]":
        result.done = True
        return False
    try:
        obj = json.loads(payload)
    except ValueError:
        result.fail("malformed", f"chunk is not JSON: {payload[:120]!r}")
        return False
    if not isinstance(obj, dict):
        result.fail("malformed", f"chunk is not a JSON object: {payload[:120]!r}")
        return False
    if "error" in obj:  # vLLM sends an error chunk when EngineCore dies mid-stream
        err = obj["error"]
        msg = err.get("message", err) if isinstance(err, dict) else err
        result.fail("server_error", f"error in stream: {msg}")
        return False
    token, answer, reasoning = _delta_kinds(obj)
    if token:
        result.chunk_times.append(now)
        result.reasoning_chunks += reasoning and not answer
        if answer and result.t_first_answer is None:
            result.t_first_answer = now
    for choice in obj.get("choices") or ():
        result.content_chars += len((choice.get("delta") or {}).get("content") or "")
        result.finish_reason = choice.get("finish_reason") or result.finish_reason
        if result.keep_text:
            _keep(result, choice.get("delta") or {})
    if isinstance(obj.get("usage"), dict):
        result.usage = obj["usage"]
    if isinstance(obj.get("timings"), dict):
        result.timings = obj["timings"]
    return True


def _keep(result: StreamResult, delta):
    if isinstance(delta.get("content"), str) and delta["content"]:
        result.content_parts.append(delta["content"])
        result.content_ends.append(result.content_chars)
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    if isinstance(reasoning, str):
        result.reasoning_parts.append(reasoning)
    for call in delta.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        slot = result.tool_calls.setdefault(call.get("index", 0), {"id": None, "name": None, "arguments": ""})
        fn = call.get("function") or {}
        slot["id"] = call.get("id") or slot["id"]
        slot["name"] = fn.get("name") or slot["name"]
        if isinstance(fn.get("arguments"), str):
            slot["arguments"] += fn["arguments"]


async def _read_stream(raw, result: StreamResult):
    if "text/event-stream" not in raw.headers.get("content-type", ""):
        body = (await raw.aread())[:200]
        return result.fail(
            "malformed", f"expected text/event-stream, got {raw.headers.get('content-type')!r}: {body!r}"
        )
    parser = SSEParser()
    async for data in raw.aiter_bytes():
        now = time.monotonic()
        for payload in parser.feed(data):
            if not _apply(result, payload, now):
                return result
    return result


async def stream_chat(client, url, body, *, timeout=600.0, idle_timeout=120.0, keep_text=False):
    """POST a streaming chat request and time every chunk. Never raises for engine faults."""
    result = StreamResult(keep_text=keep_text)
    tmo = http.httpx.Timeout(connect=10.0, read=idle_timeout, write=30.0, pool=10.0)
    flight = own.begin(url, timeout_s=timeout)  # in flight until counted: see own.begin
    result.t_send = time.monotonic()
    try:
        async with asyncio.timeout(timeout):
            async with http.astream(client, "POST", url, timeout=tmo, json=body) as raw:
                result.status = raw.status_code
                await _read_stream(raw, result)
    except TimeoutError:
        result.fail("timeout", f"no complete answer within {timeout:g} s")
    except http.HttpError as exc:
        result.status = exc.status or result.status
        result.fail(*_bucket_of(exc, idle_timeout))
    except asyncio.CancelledError:  # its run gave up on it (an A/B side done first): the engine aborts it
        own.record(url, "abort", flight)
        raise
    result.t_end = time.monotonic()
    finish_checks(result)
    # Counted for the live request contract, which judges the operator's traffic only.
    own.record(url, result.finish_reason if result.status == 200 else None, flight)
    return result


def _bucket_of(exc, idle_timeout):
    if isinstance(exc, http.HttpStatus):
        text = str(exc)
        return classify_status(exc.status, text), text
    if isinstance(exc, http.Timeout):
        return "timeout", f"{exc} (idle limit {idle_timeout:g} s)"
    return "disconnect", str(exc)


def finish_checks(result: StreamResult):
    """Buckets that only show once the stream is over."""
    if result.bucket:
        return result
    if not result.done and result.finish_reason is None:
        return result.fail("disconnect", "stream ended before finish_reason / [DONE]")
    if not result.chunk_times:
        return result.fail("empty", f"no tokens (finish_reason={result.finish_reason})")
    if result.usage is None:
        return result.fail("malformed", "no usage in the stream (stream_options.include_usage not honoured)")
    return result


@dataclass
class Measurement:
    """The figures of one successful request (definitions: docs/benchmarks.md)."""

    ttft_ms: float
    first_answer_ms: float | None
    decode_tokens_per_s: float | None
    chunks: int
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None
    reasoning_tokens: int | None
    reasoning_chunks: int
    total_ms: float
    chunk_gap_ms: dict

    def as_dict(self):
        return asdict(self)


def _usage_int(usage, *path):
    cur = usage
    for key in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return cur if isinstance(cur, int) and not isinstance(cur, bool) else None


def decode_rate(n_tokens, t_first, t_last):
    """(N − 1) / (t_last − t_first); None when it cannot be measured (one chunk)."""
    if n_tokens is None or n_tokens < 2 or t_last <= t_first:
        return None
    return (n_tokens - 1) / (t_last - t_first)


def gap_summary(times):
    gaps = sorted((b - a) * 1000 for a, b in itertools.pairwise(times))
    if not gaps:
        return {}
    return {"min": gaps[0], "median": gaps[len(gaps) // 2], "max": gaps[-1]}


def measure(result: StreamResult) -> Measurement:
    usage = result.usage or {}
    times = result.chunk_times
    n = _usage_int(usage, "completion_tokens")
    cached = _usage_int(usage, "prompt_tokens_details", "cached_tokens")
    if cached is None and result.timings:
        cached = result.timings.get("cache_n")
    return Measurement(
        ttft_ms=(times[0] - result.t_send) * 1000,
        first_answer_ms=None if result.t_first_answer is None else (result.t_first_answer - result.t_send) * 1000,
        decode_tokens_per_s=decode_rate(n, times[0], times[-1]),
        chunks=len(times),
        prompt_tokens=_usage_int(usage, "prompt_tokens"),
        cached_tokens=cached,
        completion_tokens=n,
        reasoning_tokens=_usage_int(usage, "completion_tokens_details", "reasoning_tokens"),
        reasoning_chunks=result.reasoning_chunks,
        total_ms=(result.t_end - result.t_send) * 1000,
        chunk_gap_ms=gap_summary(times),
    )


def check_output(result: StreamResult, expected_tokens):
    """Pinned output: fewer tokens than asked (finish_reason length, or an early stop) is truncation."""
    if result.bucket or expected_tokens is None:
        return result
    n = _usage_int(result.usage or {}, "completion_tokens")
    if n is not None and n < expected_tokens:
        result.fail(
            "truncated", f"{n} of {expected_tokens} pinned output tokens (finish_reason={result.finish_reason})"
        )
    return result
