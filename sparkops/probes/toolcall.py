"""Tool call: a request with one tool; the call must parse and its arguments validate against the
tool's JSON schema (the jsonschema library). Reported raw and after schema-aware coercion, apart:
"3" for an integer fails raw and passes coerced (an engine that returns every argument as a string
is compatible with a client that normalises, and still wrong)."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from .session import case

TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_forecast",
        "description": "Weather forecast for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "examples": ["Oslo"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
                "units": {"type": "string", "enum": ["metric", "imperial"]},
                "detail": {
                    "type": "object",
                    "properties": {"hourly": {"type": "boolean"}, "alerts": {"type": "boolean"}},
                    "required": ["hourly", "alerts"],
                    "additionalProperties": False,
                },
            },
            "required": ["city", "days", "units", "detail"],
            "additionalProperties": False,
        },
    },
}
PROMPT = (
    "Use the get_forecast tool: the 3-day forecast for Oslo in metric units, with hourly detail and weather alerts."
)
SCHEMA = TOOL["function"]["parameters"]
_INT = re.compile(r"-?\d+")
_NUM = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")
GOOD = "valid"


def coerce(value, schema):
    """VALUE made to fit SCHEMA where a string stands for the right type ("3", "true", '{"a": 1}')."""
    kind = (schema or {}).get("type")
    if isinstance(value, str):
        text = value.strip()
        if kind == "integer" and _INT.fullmatch(text):
            return int(text)
        if kind == "number" and _NUM.fullmatch(text):
            return float(text)
        if kind == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if kind in ("object", "array"):
            try:
                parsed = json.loads(text)
            except ValueError:
                return value
            if isinstance(parsed, dict if kind == "object" else list):
                return coerce(parsed, schema)
        return value
    if kind == "object" and isinstance(value, dict):
        props = schema.get("properties") or {}
        return {k: coerce(v, props.get(k) or {}) for k, v in value.items()}
    if kind == "array" and isinstance(value, list):
        return [coerce(v, schema.get("items") or {}) for v in value]
    return value


def validate(args, schema=SCHEMA) -> str | None:
    """The first schema error in words, or None when ARGS validate."""
    error = best_match(Draft202012Validator(schema).iter_errors(args))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(arguments)"
    return f"{where}: {error.message}"[:300]


def judge(result) -> tuple[str, dict]:
    """(verdict, detail) of one answer: valid | strings | invalid | unparsed | no_call."""
    calls = [result.tool_calls[k] for k in sorted(result.tool_calls)]
    if not calls:
        return "no_call", {"content": result.content[:300]}
    call = calls[0]
    detail = {"name": call["name"], "arguments": call["arguments"][:2000], "calls": len(calls)}
    try:
        args = json.loads(call["arguments"] or "")
    except ValueError as exc:
        return "unparsed", {**detail, "raw_error": f"arguments are not JSON: {exc}"}
    if call["name"] != TOOL["function"]["name"]:
        return "invalid", {**detail, "raw_error": f"called {call['name']!r}, not get_forecast"}
    raw = validate(args)
    coerced = raw and validate(coerce(args, SCHEMA))
    detail.update(raw_valid=raw is None, coerced_valid=coerced is None, raw_error=raw, coerced_error=coerced)
    if raw is None:
        return GOOD, detail
    return ("strings" if coerced is None else "invalid"), detail


class ToolProbe:
    def __init__(self, spec, session, salt):
        self.spec, self.session, self.salt = spec, session, salt

    @property
    def total(self):
        return self.spec.reps

    async def prepare(self, window):  # noqa: ARG002 (the probes' prepare signature)
        return None

    def jobs(self):
        for rep in range(self.spec.reps):
            yield self._job(rep)

    def _job(self, rep):
        async def run():
            messages = [{"role": "user", "content": PROMPT}]
            result = await self.session.send(
                messages, max_tokens=self.spec.tokens, extra={"tools": [TOOL], "tool_choice": "auto"}
            )
            verdict, detail = judge(result) if result.bucket is None else ("", {})
            return case(result, label=f"rep {rep + 1}", rep=rep, verdict=verdict, detail=detail)

        return run

    def summarize(self, cases):
        ok = [c for c in cases if c["ok"]]
        verdicts = Counter(c["verdict"] for c in ok)
        raw = sum(1 for c in ok if c["detail"].get("raw_valid"))
        coerced = sum(1 for c in ok if c["detail"].get("raw_valid") or c["detail"].get("coerced_valid"))
        passed = bool(ok) and raw == len(cases)
        return {
            "kind": "tool",
            "verdicts": dict(verdicts),
            "raw_valid": raw,
            "coerced_valid": coerced,
            "n": len(cases),
            "passed": passed,
            "headline": f"raw {raw}/{len(cases)} valid, coerced {coerced}/{len(cases)}"
            + ("" if raw == len(ok) else " (" + ", ".join(f"{k} ×{v}" for k, v in verdicts.items() if k != GOOD) + ")"),
        }
