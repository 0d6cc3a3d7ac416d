"""What a run sends: the parameters (RunSpec), the prompt text and the request body.

A RunSpec is plain data so a run can be re-created from its stored config and the CLI
can run without a saved profile. Its hash covers exactly what is sent, so runs are
only compared with runs that sent the same thing."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from sparkops.measured.spec import MeasuredSpec, profile_fields

from .hashing import HASH_FIELDS, PROMPT_VERSION, stable_hash

_WORDS = (
    "system",
    "engine",
    "request",
    "token",
    "memory",
    "window",
    "cache",
    "prefix",
    "stream",
    "agent",
    "model",
    "decode",
    "prefill",
    "kernel",
    "clock",
    "power",
    "queue",
    "worker",
    "schedule",
    "latency",
    "river",
    "mountain",
    "harbour",
    "library",
    "garden",
    "market",
    "bridge",
    "lantern",
    "orchard",
    "valley",
    "careful",
    "quiet",
    "bright",
    "narrow",
    "ancient",
    "steady",
    "curious",
    "distant",
    "gentle",
    "rapid",
    "builds",
    "measures",
    "records",
    "carries",
    "watches",
    "repairs",
    "counts",
    "follows",
    "explains",
    "keeps",
)


def filler(n_words):
    """Deterministic, varied prose-like filler (same words every time for the same n)."""
    rng = random.Random(PROMPT_VERSION)
    words = [rng.choice(_WORDS) for _ in range(n_words)]
    for i in range(11, len(words), 12):  # sentence breaks keep tokenizers from merging oddly
        words[i] += "."
    return " ".join(words)


@dataclass
class RunSpec(MeasuredSpec):
    engine_name: str
    engine_kind: str
    base_url: str
    workload: str = "essay"
    instruction: str = "Continue the text above with a long, detailed essay."
    depth: int = 1024
    mode: str = "cold"
    output_tokens: int = 512
    sampling: str = "server"
    sampling_params: dict = field(default_factory=dict)
    thinking: str = "server"
    reps: int = 3
    concurrency: int = 1
    force: bool = False
    timeout_s: float = 600.0
    model: str | None = None

    @classmethod
    def from_profile(cls, profile):
        own = ("workload", "instruction", "depth", "mode", "output_tokens", "concurrency", "force")
        return cls(**profile_fields(profile, *own))

    def params_hash(self):
        data = {k: getattr(self, k) for k in HASH_FIELDS}
        data["prompt_version"] = PROMPT_VERSION
        return stable_hash(data)

    # ---- prompts ---------------------------------------------------------------------
    def messages(self, n_words, *, salt, turn=None):
        """Cold: one user message, salt first. Follow-up: a fixed conversation prefix
        (salted per run) plus a new user turn that differs per repetition."""
        head = f"[{salt}] " + filler(n_words)
        if self.mode == "follow_up":
            return [
                {"role": "user", "content": head},
                {"role": "assistant", "content": "Noted. What should I do with it?"},
                {"role": "user", "content": f"Turn {turn or 0}. {self.instruction}"},
            ]
        return [{"role": "user", "content": f"{head}\n\n{self.instruction}"}]

    def body(self, messages, *, output_tokens=None, pin=True):
        n = self.output_tokens if output_tokens is None else output_tokens
        body = {"messages": messages, "stream": True, "stream_options": {"include_usage": True}, "max_tokens": n}
        if self.model:
            body["model"] = self.model
        if pin:  # the output length is part of the measurement, not the model's choice
            body["ignore_eos"] = True
            body["n_predict" if self.engine_kind == "llamacpp" else "min_tokens"] = n
        if self.sampling == "greedy":
            body["temperature"] = 0.0
        elif self.sampling == "explicit":
            body.update(self.sampling_params)
        if self.thinking != "server":
            body["chat_template_kwargs"] = {"enable_thinking": self.thinking == "on"}
        return body

    def chat_url(self):
        return f"{self.base_url.rstrip('/')}/v1/chat/completions"


def new_salt():
    return uuid.uuid4().hex[:12]


def depth_tolerance(depth):
    """How far usage.prompt_tokens may sit from the asked depth: 2 % or 32 tokens."""
    return max(32, int(depth * 0.02))


# The fields of a RunSpec that name the engine it measures, not the work (an A/B experiment's workload
# is the work alone; each arm's engine fills these in).
ENGINE_FIELDS = ("engine_name", "engine_kind", "base_url", "model")


def workload_fields(workload: dict[str, Any]) -> dict[str, Any]:
    """The RunSpec fields of WORKLOAD, without the engine's own."""
    return {k: v for k, v in workload.items() if k in RunSpec.__dataclass_fields__ and k not in ENGINE_FIELDS}
