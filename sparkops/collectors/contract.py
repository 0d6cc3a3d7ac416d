"""The request contract on live traffic, from what the engines already publish (no proxy).

From vLLM's /metrics, over a trailing window (SPARKOPS_CONTRACT_WINDOW_S):
- `vllm:request_success_total{finished_reason}`: the share of stop / length / abort /
  error / repetition among the requests that finished;
- `vllm:request_prompt_tokens`: how many prompts landed in its top bucket below
  max_model_len (vLLM's 1-2-5 buckets are capped at the window), the requests living at
  the edge of the window;
- `vllm:e2e_request_latency_seconds`: requests that end at the same duration again and
  again (600.0 s, 600.01 s) are a timeout layer cutting them (SPARKOPS_CONTRACT_CUT_WINDOW_S).
  A histogram cannot say how long one request took, but between two polls the long
  requests that all fell into one bucket took on average (Δsum − the short ones) / Δcount;
  that is taken as their duration when the short requests of the same interval leave it
  uncertain by at most CUT_TOLERANCE_S. llama.cpp publishes none of these three.

From the engines' journal lines (llama.cpp and vLLM), over the same window: HTTP 400s
(llama.cpp: its context-size send_error; vLLM: uvicorn's access line, which says no more
than 400) and 500s, and llama.cpp's "unparsed peg-native output" (llama.cpp#27733: the
client sees only an HTTP 500), whose last line is kept to be quoted.

The collector state keeps the cumulative counts a few times a window (RING_STEP_S apart),
so a window's figures are one subtraction per poll."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from sparkops.collectors import prom

VLLM_FAMILIES = ("vllm:request_success", "vllm:request_prompt_tokens", "vllm:e2e_request_latency_seconds")
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
RING_STEP_S = 30.0  # at most; a twentieth of the window when that is shorter (a ring of ~20 entries)
MIN_CUT_S = 30.0  # a timeout that cuts requests is longer than this
CUT_TOLERANCE_S = 0.25  # durations this close are one duration
ROUND_TO_S = 10.0  # timeouts are round numbers: within CUT_TOLERANCE_S of a multiple of this
KEEP_CUTS = 200
KEEP_EVENTS = 500
# SparkOps's own requests in the ring (sparkops/collectors/own.py): "_own:<reason>".
OWN_PREFIX = "_own:"
OWN_ERROR = "_error"
OWN_IN_FLIGHT = "_in_flight"  # own.IN_FLIGHT: sent, not yet counted
# Own requests counted a few milliseconds after the engine counted them may straddle a poll.
OWN_SLACK = 2.0


def window_s() -> float:
    return float(settings.SPARKOPS_CONTRACT_WINDOW_S)


def cut_window_s() -> float:
    return float(settings.SPARKOPS_CONTRACT_CUT_WINDOW_S)


# --- vLLM /metrics -------------------------------------------------------------------------


def vllm_metrics(samples: prom.Samples) -> dict[str, Any]:
    """What a vLLM scrape says about finished requests (cumulative), or {} when it lacks it."""
    finished: dict[str, float] = {}
    for labels, value in samples.get("vllm:request_success_total", ()):
        reason = labels.get("finished_reason")
        if reason:
            finished[reason] = finished.get(reason, 0.0) + value
    if not finished:
        return {}
    return {
        "finished": finished,
        "prompt_hist": prom.buckets(samples, "vllm:request_prompt_tokens"),
        "e2e_hist": prom.buckets(samples, "vllm:e2e_request_latency_seconds"),
        "e2e_sum": prom.total(samples, "vllm:e2e_request_latency_seconds_sum"),
    }


def edge_bound(hist: prom.Buckets, window: int | None) -> float | None:
    """The top finite bucket bound below the window: prompts above it live at its edge."""
    bounds = [le for le in hist if math.isfinite(le) and (not window or le < window)]
    return max(bounds) if bounds else None


def _cumulative(metrics: Mapping[str, Any], window: int | None) -> tuple[dict[str, float], float | None]:
    """The counts kept in the ring: finished per reason, prompts and prompts over the edge."""
    cum = {reason: metrics["finished"].get(reason, 0.0) for reason in FINISH_REASONS}
    cum.update({k: v for k, v in metrics["finished"].items() if k not in cum})
    hist = metrics.get("prompt_hist") or {}
    edge = edge_bound(hist, window)
    if hist and edge is not None:
        total = hist.get(math.inf, max(hist.values()))
        cum["_prompts"], cum["_over_edge"] = total, total - hist.get(edge, 0.0)
    return cum, edge


def derive(
    metrics: Mapping[str, Any],
    state: dict[str, Any],
    *,
    now: float,
    window: int | None,
    journal: dict[str, Any] | None = None,
    own: Mapping[str, float | str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(reading["contract"], new collector state) for one poll. METRICS: `vllm_metrics` of
    this scrape ({} when the engine publishes none or is down); STATE: the last poll's;
    WINDOW: the engine's max_model_len; JOURNAL: the host reader's `journal_summary`;
    OWN: SparkOps's own requests to this engine (`sparkops.collectors.own.counts`,
    cumulative), subtracted over the window so the figures are the operator's traffic
    (None: not known here, nothing subtracted)."""
    reading: dict[str, Any] = {"window_s": window_s(), "metrics": bool(metrics), "journal": journal}
    if not metrics:
        return reading, state
    cum, edge = _cumulative(metrics, window)
    error = (own or {}).get(OWN_ERROR)
    own_error = str(error) if error else None
    if own is not None and not own_error:
        cum.update({OWN_PREFIX + r: float(own.get(r, 0.0)) for r in FINISH_REASONS})
    ring = list(state.get("ring") or [])
    if ring and any(cum.get(k, 0.0) < v for k, v in ring[-1][1].items() if k in cum or not k.startswith(OWN_PREFIX)):
        ring, state = (
            [],
            {},
        )  # a counter went down: the engine restarted (or SparkOps's own count), the window starts over
    if ring and OWN_PREFIX + "stop" in cum and OWN_PREFIX + "stop" not in ring[0][1]:
        ring = []  # its own requests were not counted at the window's start: the window starts over
    ring = [entry for entry in ring if now - entry[0] <= window_s()]
    if not ring or now - ring[-1][0] >= min(RING_STEP_S, window_s() / 20):
        ring.append([now, cum])
    base_t, base = ring[0]
    delta = {k: max(0.0, v - base.get(k, 0.0)) for k, v in cum.items()}
    finished = {k: v for k, v in delta.items() if not k.startswith("_")}
    requests = sum(finished.values())
    if own is not None:
        finished, reading["own"], requests = _operators(finished, delta, own_error, float(own.get(OWN_IN_FLIGHT) or 0))
    reading.update(
        span_s=round(now - base_t, 1),
        finished=finished,
        requests=requests,
        shares={k: v / requests for k, v in finished.items()} if requests else {},
        edge=_edge(delta, edge, window),
    )
    cuts, cut = _cuts(metrics, state, now)
    reading["e2e_cut"] = cut
    new_state = {
        "ring": ring,
        "cuts": cuts,
        "e2e": {
            "hist": {str(le): c for le, c in (metrics.get("e2e_hist") or {}).items()},
            "sum": metrics.get("e2e_sum"),
        },
    }
    return reading, new_state


def _operators(
    finished: dict[str, float], delta: Mapping[str, float], own_error: str | None, in_flight: float
) -> tuple[dict[str, float], dict[str, Any], float]:
    """(the operator's finished requests per reason, reading["own"], how many requests the
    operator's are): the engine's counts over the window less SparkOps's own. "judged" is False
    where it cannot tell whose requests they were: its own requests cannot be read, or the
    engine's counters moved less than its own requests explain (another engine behind the same
    address, a counter that missed them); the contract rules then say so and do not fire.

    IN_FLIGHT of its own requests were sent and not yet counted: the engine may have finished
    (and counted) any of them, under any reason. So each reason's count is taken low by up to
    IN_FLIGHT, and the requests low by IN_FLIGHT: a share of one reason among them, (n - k) /
    (N - k), only falls as k grows, so SparkOps's requests in flight never raise it."""
    total = sum(finished.values())
    mine = {r: delta.get(OWN_PREFIX + r, 0.0) for r in FINISH_REASONS}
    excluded = sum(mine.values())
    info: dict[str, Any] = {
        "excluded": excluded,
        "finished": {r: n for r, n in mine.items() if n},
        "in_flight": in_flight,
        "judged": True,
        "why": "",
    }
    if own_error:
        info.update(judged=False, why=own_error)
        return finished, info, total
    short = {r: n - finished.get(r, 0.0) for r, n in mine.items() if n - finished.get(r, 0.0) > OWN_SLACK}
    if short:
        said = ", ".join(f"{mine[r]:.0f} {r} of its own against {finished.get(r, 0.0):.0f}" for r in short)
        info.update(
            judged=False,
            why=f"the engine's counters moved less than SparkOps's own requests explain ({said}): "
            "whose requests they were cannot be told",
        )
        return finished, info, total
    operators = {k: max(0.0, v - mine.get(k, 0.0)) for k, v in finished.items()}
    requests = max(0.0, sum(operators.values()) - in_flight)
    return {k: max(0.0, v - in_flight) for k, v in operators.items()}, info, requests


def judged_text(own: object) -> str:
    """ "operator's traffic only (N of SparkOps's own requests excluded)", or '' where own requests are not tracked."""
    if not isinstance(own, dict):
        return ""
    return f"operator's traffic only ({own.get('excluded') or 0:.0f} of SparkOps's own requests excluded)"


def _edge(delta: Mapping[str, float], edge: float | None, window: int | None) -> dict[str, Any] | None:
    if edge is None or "_prompts" not in delta:
        return None
    prompts, over = delta["_prompts"], delta["_over_edge"]
    return {
        "bound_tokens": int(edge),
        "window_tokens": window,
        "of_window": edge / window if window else None,
        "prompts": prompts,
        "over": over,
        "share": over / prompts if prompts else None,
    }


def _cuts(
    metrics: Mapping[str, Any], state: Mapping[str, Any], now: float
) -> tuple[list[list[float]], dict[str, Any] | None]:
    """The clusters of long requests that ended at one duration (see the module's docstring)."""
    cuts = [c for c in state.get("cuts") or [] if now - c[0] <= cut_window_s()]
    before = state.get("e2e") or {}
    observed = _long_duration(
        metrics.get("e2e_hist") or {},
        {float(le): c for le, c in (before.get("hist") or {}).items()},
        (metrics.get("e2e_sum") or 0.0) - (before.get("sum") or 0.0) if before.get("sum") is not None else None,
    )
    if observed is not None and _round(observed[0]):  # only a round duration can be a timeout's
        cuts.append([now, *observed])
    cuts = cuts[-KEEP_CUTS:]
    return cuts, _cluster(cuts)


def _long_duration(hist: prom.Buckets, before: prom.Buckets, d_sum: float | None) -> list[float] | None:
    """[mean seconds, how many] of the long requests that ended since the last poll, when they
    all fell into one bucket and the short ones blur their mean by at most CUT_TOLERANCE_S."""
    delta = prom.delta_buckets(hist, before) if before else None
    if not delta or d_sum is None:
        return None
    bounds = sorted(delta)
    counts: list[tuple[float, float, float]] = []
    prev_le, prev_cum = 0.0, 0.0
    for le in bounds:
        counts.append((prev_le, le, delta[le] - prev_cum))
        prev_le, prev_cum = le, delta[le]
    long = [(lo, hi, n) for lo, hi, n in counts if n > 0 and lo >= MIN_CUT_S]
    if len(long) != 1:
        return None
    lo, hi, n_long = long[0]
    short = [(lo_, hi_, n) for lo_, hi_, n in counts if n > 0 and lo_ < MIN_CUT_S]
    if any(math.isinf(hi_) for _, hi_, _ in short):
        return None
    short_mid = sum(n * (a + b) / 2 for a, b, n in short)
    blur = sum(n * (b - a) / 2 for a, b, n in short) / n_long
    mean = (d_sum - short_mid) / n_long
    if blur > CUT_TOLERANCE_S or not lo - CUT_TOLERANCE_S <= mean <= hi + CUT_TOLERANCE_S:
        return None
    return [round(mean, 3), n_long]


def _round(seconds: float) -> bool:
    return abs(seconds - round(seconds / ROUND_TO_S) * ROUND_TO_S) <= CUT_TOLERANCE_S


def _cluster(cuts: list[list[float]]) -> dict[str, Any] | None:
    """The round duration most requests ended at, {"at_s", "requests", "intervals"}, or None
    when no round duration was seen more than once."""
    best: dict[str, Any] | None = None
    for _, seconds, _ in cuts:
        near = [c for c in cuts if abs(c[1] - seconds) <= CUT_TOLERANCE_S]
        n = sum(c[2] for c in near)
        if n >= 2 and (best is None or n > best["requests"]):
            values = sorted(c[1] for c in near)
            best = {
                "at_s": round(seconds / ROUND_TO_S) * ROUND_TO_S,
                "requests": n,
                "intervals": len(near),
                "seen_s": [values[0], values[-1]],
                "last_at": max(c[0] for c in near),
            }
    return best


# --- journal lines -------------------------------------------------------------------------

LLAMA_400 = re.compile(
    r"send_error: .*error: (?:request \(\d+ tokens\) exceeds the available context size"
    r"|input \(\d+ tokens\) is larger than the max context size)"
)
LLAMA_500 = re.compile(r'got exception: .*"code"\s*:\s*500')
PEG_NATIVE = re.compile(r"unparsed peg-native output:")
ACCESS = re.compile(r'"(?:POST|PUT) (/\S*) HTTP/[\d.]+" (400|500)\b')


def classify(text: str) -> str | None:
    """'http_400' | 'http_500' | 'peg_native' | None for one engine log line (ANSI stripped)."""
    if PEG_NATIVE.search(text):
        return "peg_native"
    if LLAMA_400.search(text):
        return "http_400"
    if LLAMA_500.search(text):
        return "http_500"
    access = ACCESS.search(text)
    if access:
        return f"http_{access[2]}"
    return None


def journal_note(
    book: dict[str, dict[str, Any]], unit: str | None, entry: Mapping[str, Any], text: str, *, now: float
) -> None:
    """Count ENTRY (one journal line of UNIT, message TEXT) in BOOK, the host state's
    {unit: {kind: [times], "last": {kind: line}}}, if it is one of ours."""
    kind = classify(text)
    if kind is None or not unit:
        return
    try:
        at = int(entry["__REALTIME_TIMESTAMP"]) / 1e6
    except (KeyError, TypeError, ValueError):
        at = now
    mine = book.setdefault(unit, {})
    mine[kind] = [*(mine.get(kind) or [])[-KEEP_EVENTS + 1 :], at]
    mine.setdefault("last", {})[kind] = {"at": at, "message": text[:500]}


def journal_prune(book: Mapping[str, Mapping[str, Any]], *, now: float) -> dict[str, dict[str, Any]]:
    """BOOK without the events that left the window (and units with none left)."""
    horizon = now - window_s()
    out: dict[str, dict[str, Any]] = {}
    for unit, mine in book.items():
        kept = {k: [t for t in v if t >= horizon] for k, v in mine.items() if k != "last"}
        kept = {k: v for k, v in kept.items() if v}
        if kept:
            last = {k: v for k, v in (mine.get("last") or {}).items() if k in kept}
            out[unit] = {**kept, "last": last}
    return out


def journal_summary(mine: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a unit's journal said within the window: counts and the last line of each kind."""
    mine = mine or {}
    return {
        "window_s": window_s(),
        "http_400": len(mine.get("http_400") or []),
        "http_500": len(mine.get("http_500") or []),
        "peg_native": len(mine.get("peg_native") or []),
        "last": mine.get("last") or {},
    }
