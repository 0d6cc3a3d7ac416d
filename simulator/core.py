"""Shared pieces of the simulated engines: configuration, token counting, prefix cache,
generated text, the paced sender and the fault vocabulary.

Token counting (deterministic, documented for tests): the prompt is the concatenation of
every message's text content; **one token per whitespace-separated word**. The words
themselves are the token ids used for block hashing by the prefix cache. Each generated
token is one word from a fixed vocabulary, rendered with a leading space.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field, fields

FAULT_KINDS = ("exit0", "crash", "hang", "slow", "cache_drop", "http500", "garbage_metrics", "clear")
KINDS = ("vllm", "llamacpp", "sglang", "openai")

VOCAB = tuple(
    " " + w
    for w in (
        "the quick brown fox jumps over lazy dog while agents write code and tests pass "
        "under load on one desk box with two engines resident kv cache blocks hit again"
    ).split()
)
REASONING_VOCAB = tuple(" " + w for w in "let me think about this step by step first".split())


@dataclass
class EngineConfig:
    kind: str = "vllm"
    name: str = "sim"
    model: str = ""  # served model name; default per kind
    host: str = "127.0.0.1"
    port: int = 0
    rate: float = 40.0  # decode tokens/s for one stream
    aggregate_cap: float = 0.0  # >0: decode tokens/s shared by every stream at once (each gets min(rate, cap/n))
    tokens_per_chunk: int = 1  # >1 simulates speculative decoding (k tokens per step)
    ttft: float = 0.05  # fixed part of time to first token, seconds
    prefill_rate: float = 4000.0  # uncached prompt tokens/s added to the TTFT
    max_model_len: int = 32768  # window (vLLM max_model_len, llama.cpp per-slot n_ctx)
    num_gpu_blocks: int = 47904  # KV pool size in blocks (47,904 x 16 = 766,464 tokens)
    memory_share: float = 0.0  # --gpu-memory-utilization / --mem-fraction-static (0: the default 0.9)
    kv_tokens_per_gib: float = 31443.0  # pool tokens per GiB, dense (docs/field-notes.md §2): the boot line's GiB
    block_size: int = 16  # prefix-cache granularity in tokens
    slots: int = 4  # llama.cpp --parallel
    eos_after: int = 48  # natural completion length when max_tokens allows
    reasoning_tokens: int = 0  # >0: emit reasoning_content when enable_thinking
    background_rps: float = 0.0  # synthetic requests/s bumping counters (demo mode)
    prefix_hit_rate: float = 0.9  # hit rate of the synthetic traffic
    load_seconds: float = 0.5  # model load time before serving
    exit_delay: float = 1.0  # engine death -> process exit (real vLLM: ~4.5 s)
    slow_seconds: float = 5.0  # delay per request under the `slow` fault
    seed: int = 0
    process_metrics: bool = False  # add process_*/python_* collectors like the default registry
    # How the simulated model answers the quality probes (simulator/behaviours.py):
    needle_recall: str = "1"  # recall by depth: "1", or "10:1,50:0.5,90:0" (depth %: probability)
    needle_decoy: float = 0.0  # share of missed needles answered with a decoy's value instead
    needle_echo: bool = False  # answer by repeating every fact of the document (neither needle nor decoy wins)
    degenerate_after: int = 0  # >0: content turns to degenerate_mode after this many tokens
    degenerate_mode: str = "hex"  # hex | loop | char
    tool_calls: str = "valid"  # valid | strings (arguments as strings) | broken (not JSON) | none (text only)
    reasoning_effort: str = "honoured"  # honoured | inert (ignored) | inverted (re-enables thinking that was off)
    over_window: str = "clamp"  # prompt + max_tokens over the window: clamp (vLLM >= 0.32) | reject (HTTP 400)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown engine kind {self.kind!r}; expected one of {', '.join(KINDS)}")
        if not self.model:
            self.model = {"vllm": "Qwen/Qwen3-8B", "llamacpp": "qwen3-8b-q4_k_m", "sglang": "Qwen/Qwen3-8B"}.get(
                self.kind, "local-model"
            )
        if self.rate <= 0 or self.tokens_per_chunk < 1 or self.block_size < 1:
            raise ValueError("rate must be > 0, tokens_per_chunk and block_size >= 1")
        if self.aggregate_cap < 0:
            raise ValueError("aggregate_cap must be >= 0 (0: no shared cap)")

    @property
    def kv_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size

    @classmethod
    def from_options(cls, options: dict) -> EngineConfig:
        """Build from string options (CLI / engine spec), converting by field type."""
        types = {f.name: f.type for f in fields(cls)}
        kw = {}
        for name, raw in options.items():
            key = name.replace("-", "_")
            if key not in types:
                raise ValueError(f"unknown engine option {key!r}")
            kw[key] = _convert(types[key], raw)
        return cls(**kw)


def _convert(type_name, raw):
    if not isinstance(raw, str):
        return raw
    if type_name in ("int", int):
        return int(raw)
    if type_name in ("float", float):
        return float(raw)
    if type_name in ("bool", bool):
        return raw.lower() in ("1", "true", "yes", "on")
    return raw


def prompt_words(body: dict) -> list[str]:
    """The request's prompt as a token list (one token per whitespace-separated word)."""
    words: list[str] = []
    for msg in body.get("messages") or []:
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, list):  # OpenAI content parts
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        if isinstance(content, str):
            words.extend(content.split())
    if isinstance(body.get("prompt"), str):
        words.extend(body["prompt"].split())
    return words


class PrefixCache:
    """Block-granular prefix cache like vLLM's: only whole blocks hit, chained hashes,
    LRU over the pool's blocks, and at least one prompt token is always computed."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.capacity = max(1, num_blocks)
        self.block_size = block_size
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def _hashes(self, tokens: list[str]) -> list[bytes]:
        out, prev = [], b""
        bs = self.block_size
        for i in range(len(tokens) // bs):
            prev = hashlib.blake2b(prev + "\0".join(tokens[i * bs : (i + 1) * bs]).encode(), digest_size=16).digest()
            out.append(prev)
        return out

    def lookup_and_insert(self, tokens: list[str], enabled: bool = True) -> int:
        """Return the number of cached prompt tokens, then store this prompt's blocks."""
        hashes = self._hashes(tokens)
        hit_blocks = 0
        if enabled:
            max_hit = (len(tokens) - 1) // self.block_size  # vLLM computes >= 1 token
            for h in hashes[:max_hit]:
                if h not in self._blocks:
                    break
                hit_blocks += 1
        for h in hashes:
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
        return hit_blocks * self.block_size

    def clear(self) -> None:
        self._blocks.clear()


@dataclass
class Plan:
    """What one chat request will do."""

    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int  # content tokens + reasoning tokens
    reasoning_tokens: int
    finish_reason: str
    ttft: float
    stream: bool
    include_usage: bool
    body: dict = field(default_factory=dict)
    e2e_s: float | None = None  # end-to-end seconds when not ttft + generation (a request cut by a timeout)

    def token_text(self, i: int) -> str:
        if i < self.reasoning_tokens:
            return REASONING_VOCAB[i % len(REASONING_VOCAB)]
        return VOCAB[(i - self.reasoning_tokens) % len(VOCAB)]

    def content_text(self) -> str:
        return "".join(self.token_text(i) for i in range(self.reasoning_tokens, self.completion_tokens))

    def reasoning_text(self) -> str:
        return "".join(self.token_text(i) for i in range(self.reasoning_tokens))


def completion_length(body: dict, budget: int, eos_after: int) -> tuple[int, str]:
    """Tokens to generate and the finish reason, honouring max_tokens, min_tokens, ignore_eos.

    `budget` is what the window and max_tokens allow; the simulated model "emits EOS"
    after `eos_after` tokens unless ignore_eos is set or min_tokens asks for more.
    """
    natural = max(int(body.get("min_tokens") or 0), eos_after)
    if body.get("ignore_eos"):
        return budget, "length"
    if natural < budget:
        return natural, "stop"
    return budget, "length"


def requested_max_tokens(body: dict) -> int | None:
    for key in ("max_completion_tokens", "max_tokens", "n_predict"):
        val = body.get(key)
        if isinstance(val, int) and not isinstance(val, bool) and val >= 0:
            return val
    return None


def thinking_requested(body: dict) -> bool:
    kwargs = body.get("chat_template_kwargs") or {}
    return bool(isinstance(kwargs, dict) and kwargs.get("enable_thinking"))


class SendLog:
    """Per-chunk monotonic send times of the most recent stream (for harness accuracy)."""

    def __init__(self) -> None:
        self.last: dict = {"request_id": None, "chunks": []}

    def begin(self, request_id: str, t0: float, rate: float, tpc: int) -> list:
        chunks: list = []
        self.last = {
            "request_id": request_id,
            "clock": "time.monotonic",
            "scheduled_t0": t0,
            "rate": rate,
            "tokens_per_chunk": tpc,
            "chunks": chunks,
        }
        return chunks

    def as_json(self) -> dict:
        chunks = self.last["chunks"]
        return {
            **{k: v for k, v in self.last.items() if k != "chunks"},
            "send_times": [c[0] for c in chunks],
            "tokens": [c[1] for c in chunks],
        }


async def sleep_until(deadline: float) -> None:
    """Sleep to an absolute monotonic deadline (never accumulate relative sleeps)."""
    delay = deadline - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)
