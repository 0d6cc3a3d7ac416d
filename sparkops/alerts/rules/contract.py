"""The request contract on live traffic (the operator's: SparkOps's own requests are subtracted,
sparkops/collectors/own.py): truncated answers, requests ending in error or
repetition, prompts at the window's edge, HTTP 400/500s and llama.cpp's peg-native
failures in the journal, and requests cut by a timeout layer. Inputs: the reading's
"contract" part (sparkops/collectors/contract.py), over its trailing window; each
finding clears once the window holds no more of what raised it."""

from typing import Any, ClassVar

from dashboard.models import Engine
from sparkops.collectors.contract import judged_text
from sparkops.collectors.derive import EngineReading

from ..finding import Finding
from ..rule_config import RuleSettings
from . import register
from .base import Rule


def _contract(reading: EngineReading | None) -> dict[str, Any]:
    return (reading.get("contract") if reading else None) or {}


def _cannot_tell(c: dict[str, Any]) -> bool:
    """Whether whose requests the window's figures are cannot be told (reading["own"]): then
    the finish-reason rules neither fire nor resolve, and the engine page says why."""
    own = c.get("own")
    return isinstance(own, dict) and not own.get("judged", True)


def _whose(c: dict[str, Any]) -> str:
    """' — operator's traffic only (N of SparkOps's own requests excluded)' where SparkOps counts its own."""
    text = judged_text(c.get("own"))
    return f" — {text}" if text else ""


def _own_details(c: dict[str, Any]) -> dict[str, Any]:
    own = c.get("own")
    return {"own_excluded": own.get("excluded") or 0} if isinstance(own, dict) else {}


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


@register
class TruncatedAnswers(Rule):
    key = "truncated_answers"
    title = "Truncated answers (finish_reason length)"
    severity = "warning"
    signal = "engine_polled"
    DEFAULTS: ClassVar[dict[str, Any]] = {"length_pct": 10, "min_requests": 20, "for_s": 0}
    help = (
        "Of the requests an engine finished over the contract window (vllm:request_success_total), LENGTH_PCT % "
        "or more ended with finish_reason length (at least MIN_REQUESTS requests): answers cut short, by a "
        "max_tokens too small or by prompt + max_tokens reaching the window — vLLM >= 0.32 clamps that silently "
        "with HTTP 200 instead of a 400."
    )

    def evaluate(self, *, settings: RuleSettings, engine: Engine, reading: EngineReading, **_: Any) -> list[Finding]:
        c = _contract(reading)
        if not c.get("metrics") or _cannot_tell(c):
            return []
        requests, length = c.get("requests") or 0, (c.get("finished") or {}).get("length", 0)
        share = length / requests if requests else 0.0
        active = requests >= settings["min_requests"] and share * 100 >= settings["length_pct"]
        message = (
            f"{engine.name}: {share:.0%} of {requests:.0f} requests in the last {_minutes(c.get('window_s') or 0)} "
            f"ended with finish_reason length ({length:.0f}): truncated answers. Check max_tokens, and prompt + "
            f"max_tokens against the window (vLLM >= 0.32 clamps it without an error){_whose(c)}."
        )
        return [
            Finding(
                subject=engine.name,
                engine=engine,
                active=active,
                cause="length",
                message=message,
                details={"share": round(share, 4), "length": length, "requests": requests, **_own_details(c)},
            )
        ]


@register
class FinishedInError(Rule):
    key = "finished_in_error"
    title = "Requests ending in error or repetition"
    severity = "warning"
    signal = "engine_polled"
    DEFAULTS: ClassVar[dict[str, Any]] = {"count": 1, "for_s": 0}
    help = (
        "COUNT or more requests finished with finish_reason error or repetition over the contract window "
        "(vllm:request_success_total, vLLM >= 0.20): the engine failed them, or stopped a degenerate generation."
    )

    def evaluate(self, *, settings: RuleSettings, engine: Engine, reading: EngineReading, **_: Any) -> list[Finding]:
        c = _contract(reading)
        if not c.get("metrics") or _cannot_tell(c):
            return []
        finished = c.get("finished") or {}
        error, repetition = finished.get("error", 0), finished.get("repetition", 0)
        active = error + repetition >= settings["count"]
        cause = "error" if error >= repetition else "repetition"
        message = (
            f"{engine.name}: in the last {_minutes(c.get('window_s') or 0)}, {error:.0f} requests finished with "
            f"error and {repetition:.0f} with repetition (of {c.get('requests') or 0:.0f}){_whose(c)}."
        )
        return [
            Finding(
                subject=engine.name,
                engine=engine,
                active=active,
                cause=cause,
                message=message,
                details={"error": error, "repetition": repetition, **_own_details(c)},
            )
        ]


@register
class PromptsAtWindowEdge(Rule):
    key = "prompts_at_window_edge"
    title = "Prompts at the edge of the window"
    severity = "info"
    signal = "engine_polled"
    DEFAULTS: ClassVar[dict[str, Any]] = {"share_pct": 25, "min_requests": 20, "for_s": 0}
    help = (
        "SHARE_PCT % or more of the prompts over the contract window were longer than the top bucket of "
        "vllm:request_prompt_tokens below max_model_len (at least MIN_REQUESTS prompts): agents live at the edge "
        "of the window, where the next turn gets a 400 or a truncated answer."
    )

    def evaluate(self, *, settings: RuleSettings, engine: Engine, reading: EngineReading, **_: Any) -> list[Finding]:
        c = _contract(reading)
        if not c.get("metrics"):
            return []
        edge = c.get("edge")
        if not edge or edge.get("share") is None:  # no prompt finished within the window
            return [Finding(subject=engine.name, engine=engine, active=False)]
        active = edge["prompts"] >= settings["min_requests"] and edge["share"] * 100 >= settings["share_pct"]
        of_window = (
            f" ({edge['of_window']:.0%} of the {edge['window_tokens']:,}-token window)" if edge.get("of_window") else ""
        )
        message = (
            f"{engine.name}: {edge['share']:.0%} of {edge['prompts']:.0f} prompts were over "
            f"{edge['bound_tokens']:,} tokens{of_window}: requests at the edge of the window."
        )
        return [Finding(subject=engine.name, engine=engine, active=active, cause="edge", message=message)]


@register
class RequestErrors(Rule):
    key = "request_errors"
    title = "HTTP 400/500s in the engine's log"
    severity = "warning"
    signal = "engine_polled"
    DEFAULTS: ClassVar[dict[str, Any]] = {"count_400": 5, "count_500": 3, "for_s": 0}
    help = (
        "The engine's journal logged COUNT_400 or more HTTP 400s (llama.cpp: the request exceeds the context "
        "size; vLLM: uvicorn's access line) or COUNT_500 or more 500s over the contract window. A 400 of the "
        "window is the request contract, not a model failure."
    )

    def evaluate(self, *, settings: RuleSettings, engine: Engine, reading: EngineReading, **_: Any) -> list[Finding]:
        j = _contract(reading).get("journal")
        if j is None:
            return []
        n400, n500 = j.get("http_400", 0), j.get("http_500", 0)
        hit400, hit500 = n400 >= settings["count_400"], n500 >= settings["count_500"]
        last = j.get("last") or {}
        quoted = (last.get("http_500") if hit500 else last.get("http_400")) or {}
        message = f"{engine.name} answered {n400} HTTP 400 and {n500} HTTP 500 in the last {_minutes(j['window_s'])}."
        if quoted.get("message"):
            message += f" Last: {quoted['message']}"
        return [
            Finding(
                subject=engine.name,
                engine=engine,
                active=hit400 or hit500,
                cause="http_500" if hit500 else "http_400",
                message=message,
                details={"http_400": n400, "http_500": n500},
            )
        ]


@register
class PegNativeOutput(Rule):
    key = "peg_native_output"
    title = "llama.cpp discarded a generation (unparsed peg-native output)"
    severity = "warning"
    signal = "engine_polled"
    DEFAULTS: ClassVar[dict[str, Any]] = {"for_s": 0}
    help = (
        "llama-server logged 'unparsed peg-native output' within the contract window: its strict PEG parser "
        "refused a finished generation and the client got only an HTTP 500 (llama.cpp#27733, a trailing <think> "
        "on b10766). The alert quotes the line."
    )

    def evaluate(self, *, engine: Engine, reading: EngineReading, **_: Any) -> list[Finding]:
        j = _contract(reading).get("journal")
        if j is None:
            return []
        n = j.get("peg_native", 0)
        line = ((j.get("last") or {}).get("peg_native") or {}).get("message", "")
        message = (
            f"{engine.name}: {n} generation(s) discarded by llama.cpp's peg-native parser in the last "
            f"{_minutes(j['window_s'])}; clients saw HTTP 500. Line: {line}"
        )
        return [
            Finding(
                subject=engine.name,
                engine=engine,
                active=n > 0,
                cause="peg_native",
                message=message,
                details={"line": line},
            )
        ]


@register
class TimeoutCut(Rule):
    key = "timeout_cut"
    title = "Requests cut at one round duration (a timeout layer)"
    severity = "warning"
    signal = "engine_polled"
    DEFAULTS: ClassVar[dict[str, Any]] = {"count": 3, "for_s": 0}
    help = (
        "COUNT or more requests ended at the same round duration (600.0 s, 600.01 s) within the cut window, read "
        "from vllm:e2e_request_latency_seconds: a timeout layer (agent, provider config, proxy, server) is cutting "
        "them. llama.cpp publishes no end-to-end latency histogram, so this cannot be seen there."
    )

    def evaluate(self, *, settings: RuleSettings, engine: Engine, reading: EngineReading, **_: Any) -> list[Finding]:
        c = _contract(reading)
        if not c.get("metrics"):
            return []
        cut = c.get("e2e_cut")
        if not cut:
            return [Finding(subject=engine.name, engine=engine, active=False)]
        active = cut["requests"] >= settings["count"]
        low, high = cut["seen_s"]
        message = (
            f"{engine.name}: {cut['requests']:.0f} requests ended at {cut['at_s']:g} s ({low:g}–{high:g} s): "
            f"a timeout layer is cutting them at {cut['at_s']:g} s. Every layer (agent, provider, proxy, server) "
            "needs its timeout raised."
        )
        return [
            Finding(
                subject=engine.name,
                engine=engine,
                active=active,
                cause="timeout_cut",
                message=message,
                details={"at_s": cut["at_s"], "requests": cut["requests"]},
            )
        ]
