"""How the simulated model answers, so each quality probe outcome can be shown (EngineConfig knobs):

- a retrieval question "What is the K?" is answered from the prompt's sentence "The K is V." with a
  recall that depends on how deep that sentence sits (`needle_recall`), and a missed one is answered
  with the value of a decoy — a sentence "The J is W." whose subject ends like K's — at `needle_decoy`,
  or every fact is repeated back (`needle_echo`);
- the content degenerates after `degenerate_after` tokens (hex, a looping phrase, one character);
- a request with `tools` gets a tool call whose arguments follow the first tool's JSON schema, or come
  back as strings, or are not JSON (`tool_calls`);
- `reasoning_effort` scales the reasoning, is ignored, or re-enables thinking that was off.

Healthy content is the fixed vocabulary in a pseudo-random order, so it never loops on its own."""

from __future__ import annotations

import itertools
import json
import random
import re
from dataclasses import dataclass, fields

from .core import REASONING_VOCAB, VOCAB, EngineConfig, Plan, requested_max_tokens, thinking_requested

_ORDER = tuple(random.Random(7).choices(range(len(VOCAB)), k=65_536))
_LOOP = "and then the model said the same thing again".split()
EFFORT_SCALE = {"none": 0.0, "minimal": 0.1, "low": 0.25, "medium": 0.5, "high": 1.0, "xhigh": 1.0}
_QUESTION = re.compile(r"What is (the [^?]{3,120})\?")
_FACT = re.compile(r"The ([^.?!]{3,120}?) is ([A-Za-z0-9][\w-]*)\.")
NOT_FOUND = "I cannot find that in the document."


@dataclass
class BehavedPlan(Plan):
    answer: tuple = ()  # content words (with leading spaces) when the model answers something specific
    tool_call: dict | None = None  # {"id", "name", "arguments"}: the content part is this one tool call
    degenerate_after: int = 0  # content token index where degeneration starts (0: never)
    degenerate_mode: str = "hex"
    wire_finish: str = ""  # finish_reason on the wire when it is not the engine's own (tool_calls: "stop")

    def token_text(self, i: int) -> str:
        if i < self.reasoning_tokens:
            return REASONING_VOCAB[i % len(REASONING_VOCAB)]
        j = i - self.reasoning_tokens
        if j < len(self.answer):
            return self.answer[j]
        if self.degenerate_after and j >= self.degenerate_after:
            return degenerate_token(self.degenerate_mode, j)
        return VOCAB[_ORDER[j % len(_ORDER)]]

    def tool_piece(self, lo: int, hi: int) -> bytes:
        """The tool_calls delta for content tokens [lo, hi): the arguments string spread over them."""
        call, r = self.tool_call or {}, self.reasoning_tokens
        args, n = call.get("arguments", ""), max(1, self.completion_tokens - r)
        piece = args[len(args) * (lo - r) // n : len(args) * (hi - r) // n]
        delta: dict = {"index": 0, "function": {"arguments": piece}}
        if lo == r:
            delta.update(id=call.get("id"), type="function")
            delta["function"]["name"] = call.get("name")
        return json.dumps([delta], separators=(",", ":")).encode()


def degenerate_token(mode: str, j: int) -> str:
    """What a degenerated model emits: hex (the IQ2 soak's 13 KB), one phrase looping, or one character."""
    if mode == "loop":
        return " " + _LOOP[j % len(_LOOP)]
    if mode == "char":
        return "a"
    return " " + format(random.Random(j).getrandbits(32), "08x")


def apply(cfg: EngineConfig, plan: Plan, rng: random.Random) -> BehavedPlan:
    """PLAN as the configured model would answer it."""
    body = plan.body or {}
    out = BehavedPlan(**{f.name: getattr(plan, f.name) for f in fields(Plan)})
    out.degenerate_after, out.degenerate_mode = cfg.degenerate_after, cfg.degenerate_mode
    if plan.finish_reason == "length" and body.get("ignore_eos"):
        return out  # a pinned benchmark generation: nothing to answer
    _think(cfg, out, body)
    if body.get("tools") and cfg.tool_calls != "none":
        _tool_call(cfg, out, body, rng)
    elif (answer := needle_answer(cfg, body, rng)) is not None:
        _answer(out, answer)
    return out


def _room(plan: BehavedPlan, body):
    limit = requested_max_tokens(body)
    return plan.completion_tokens if plan.finish_reason == "length" else (limit or 1 << 20)


def _think(cfg: EngineConfig, plan: BehavedPlan, body) -> None:
    on, effort = thinking_requested(body), body.get("reasoning_effort")
    if not cfg.reasoning_tokens or (not on and not (effort and cfg.reasoning_effort == "inverted")):
        plan.reasoning_tokens = 0
        return
    scale = 1.0 if cfg.reasoning_effort == "inert" else EFFORT_SCALE.get(effort, 1.0)
    room = _room(plan, body)
    if not on:  # inverted: the effort turned thinking back on, and it spends the whole answer thinking
        plan.reasoning_tokens = plan.completion_tokens = min(room, cfg.reasoning_tokens)
        return
    want = round(cfg.reasoning_tokens * scale)
    content = cfg.eos_after if plan.finish_reason == "stop" else plan.completion_tokens - plan.reasoning_tokens
    plan.completion_tokens = min(room, want + max(1, content))
    plan.reasoning_tokens = min(want, plan.completion_tokens)
    if plan.completion_tokens == room and want + content > room:
        plan.finish_reason = "length"


def _answer(plan: BehavedPlan, text) -> None:
    words = tuple(" " + w for w in text.split())
    plan.answer = words
    plan.completion_tokens = min(_room(plan, plan.body or {}), plan.reasoning_tokens + len(words))
    plan.finish_reason = "stop" if plan.completion_tokens == plan.reasoning_tokens + len(words) else "length"


def _last_user_text(body) -> str:
    for msg in reversed(body.get("messages") or []):
        if isinstance(msg, dict) and msg.get("role") == "user" and isinstance(msg.get("content"), str):
            return msg["content"]
    return ""


def recall_at(spec: str, depth: float) -> float:
    """'1' -> 1.0 everywhere; '10:1,50:0.5,90:0' -> linear between the points, flat beyond them
    (';' separates as well, for `sparkops simulate`'s comma-separated engine options)."""
    points = []
    for part in re.split(r"[,;]", spec or "1"):
        if ":" in part:
            d, p = part.split(":", 1)
            points.append((float(d), float(p)))
        else:
            return float(part)
    points.sort()
    if depth <= points[0][0]:
        return points[0][1]
    for (d0, p0), (d1, p1) in itertools.pairwise(points):
        if depth <= d1:
            return p0 + (p1 - p0) * (depth - d0) / max(1e-9, d1 - d0)
    return points[-1][1]


def needle_answer(cfg: EngineConfig, body, rng) -> str | None:
    """The answer to a retrieval question in the last user message, or None when there is none."""
    text = _last_user_text(body)
    asked = _QUESTION.findall(text)
    if not asked:
        return None
    key = asked[-1].removeprefix("the ").strip()
    anchor = " ".join(key.split()[-2:]).lower()
    needle, decoys = None, []
    for m in _FACT.finditer(text):
        subject = m.group(1).strip()
        if subject.lower() == key.lower():
            needle = (m.start(), m.group(2))
        elif subject.lower().endswith(anchor):
            decoys.append((m.start(), m.group(2)))
    if needle is None:
        return NOT_FOUND
    if cfg.needle_echo:  # a model that pastes the haystack back: every value, in document order
        return " ".join(f"The {m.group(1)} is {m.group(2)}." for m in _FACT.finditer(text) if m.group(2))
    depth = 100.0 * needle[0] / max(1, len(text))
    if rng.random() < recall_at(cfg.needle_recall, depth):
        return f"The {key} is {needle[1]}."
    if decoys and rng.random() < cfg.needle_decoy:
        near = min(decoys, key=lambda d: abs(d[0] - needle[0]))  # the decoy nearest the needle wins
        return f"The {key} is {near[1]}."
    return NOT_FOUND


def _schema_value(schema, strings):
    kind = (schema or {}).get("type")
    if "enum" in (schema or {}):
        value = schema["enum"][0]
    elif kind == "object":
        value = {k: _schema_value(v, False) for k, v in (schema.get("properties") or {}).items()}
    elif kind == "array":
        value = [_schema_value(schema.get("items") or {}, False)]
    elif kind == "integer":
        value = max(int(schema.get("minimum", 3)), 3)
    elif kind == "number":
        value = 1.5
    elif kind == "boolean":
        value = True
    else:
        value = (schema.get("examples") or ["value"])[0]
    if strings and not isinstance(value, str):  # TensorFold: integer -> "3", object -> a JSON string
        return json.dumps(value) if isinstance(value, (dict, list, bool)) else str(value)
    return value


def _tool_call(cfg: EngineConfig, plan: BehavedPlan, body, rng) -> None:
    tool = (body.get("tools") or [{}])[0]
    fn = tool.get("function") or {} if isinstance(tool, dict) else {}
    params = fn.get("parameters") or {}
    strings = cfg.tool_calls == "strings"
    args = {k: _schema_value(v, strings) for k, v in (params.get("properties") or {}).items()}
    text = json.dumps(args)
    if cfg.tool_calls == "broken":
        text = text[: max(1, len(text) - 2)]
    plan.tool_call = {"id": f"call_{rng.getrandbits(40):010x}", "name": fn.get("name"), "arguments": text}
    plan.completion_tokens = plan.reasoning_tokens + max(1, len(text) // 4)
    plan.finish_reason, plan.wire_finish = "stop", "tool_calls"
