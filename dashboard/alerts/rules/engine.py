"""Engine rules: down (liveness), restart loop, prefix-cache drop, KV saturated, queue growing, no-restart advisory."""

import itertools
import time
from typing import ClassVar

from dashboard.collectors.derive import EngineReading
from dashboard.launch.starts import parse_timestamp

from ..lifecycle import Finding
from . import register
from .base import Rule
from .causes import DEFINITIVE, _int, classify


@register
class EngineDown(Rule):
    key = "engine_down"
    title = "Engine down"
    severity = "critical"
    signal = "engine_liveness"
    DEFAULTS: ClassVar[dict] = {"failures": 2, "activating_budget_s": 600}
    help = (
        "An engine expected up fails its liveness probe twice in a row (the failed probe is re-checked at once). "
        "The alert says why: exit 0 under Restart=on-failure, unit failed, activating too long, active but not "
        "answering, process gone, refused or timeout; it quotes the last fatal journal line."
    )

    def evaluate(self, *, settings, engine, up, reason="", rechecked=False, state, unit_now=None, **_) -> list[Finding]:
        """UNIT_NOW: the engine's unit as the probe read it with this finding
        (`collectors/unitnow.UnitNow`), else what the last host reading said."""
        if up or not engine.expected_up:
            state["failures"] = 0
            down_nrestarts = state.pop("down_nrestarts", None)
            state.pop("activating_since", None)
            if not up:  # no longer expected up: someone stopped it on purpose
                return [Finding(subject=engine.name, engine=engine, active=False, resolution="no longer expected up")]
            return [
                Finding(
                    subject=engine.name,
                    engine=engine,
                    active=False,
                    resolution="up again",
                    resolved_by=_restarted_by(engine, down_nrestarts, unit_now) if down_nrestarts is not None else "",
                )
            ]
        state["failures"] = state.get("failures", 0) + (2 if rechecked else 1)
        if state["failures"] < settings["failures"]:
            return []
        here = unit_now.props if unit_now is not None else None
        unit = here or unit_of(engine)
        if unit and "down_nrestarts" not in state:
            state["down_nrestarts"] = _int(unit.get("NRestarts"))
        fatal = (unit_now.fatal_line if unit_now is not None else "") or _last_fatal(engine)
        activating_for = _activating_for(state, unit, same_clock=here is not None)
        if unit and unit.get("ActiveState") == "failed" and unit.get("Result") != "start-limit-hit":
            # A crash loop past StartLimitBurst keeps the last run's Result (exit-code): only the
            # journal says "Start request repeated too quickly".
            unit = {**unit, "start_limit_line": unit_now.start_limit_line if unit_now is not None else ""}
        cause = classify(
            unit=unit,
            reason=reason,
            activating_for_s=activating_for,
            activating_budget_s=settings["activating_budget_s"],
            fatal=fatal,
        )
        message = f"{engine.name} is down: {cause.text}."
        if fatal:
            message += f" Last fatal line: {fatal}"
        # Starting or auto-restarting: wait out the activation budget before paging.
        wait = max(0.0, settings["activating_budget_s"] - activating_for) if cause.coming_back else 0.0
        return [
            Finding(
                subject=engine.name,
                engine=engine,
                active=True,
                cause=cause.key,
                message=message,
                details={
                    "reason": reason,
                    "unit": unit or None,
                    "fatal_line": fatal,
                    "definitive": cause.key in DEFINITIVE,
                },
                for_s=wait,
                fire_now=not cause.coming_back,
                renotify_on_cause=cause.key in DEFINITIVE,
            )
        ]


def _restarted_by(engine, down_nrestarts, unit_now=None):
    """Who brought ENGINE back, as far as systemd tells: its NRestarts counts only the restarts
    systemd made itself (Restart=), not `systemctl restart` by a person. '' when it cannot tell
    (a person's Restart button, read from the alert's timeline by the lifecycle, comes first)."""
    unit = (unit_now.props if unit_now is not None else None) or unit_of(engine)
    now = _int((unit or {}).get("NRestarts"))
    if down_nrestarts is None or now is None:
        return ""
    if now > down_nrestarts:
        return f"restarted by systemd (NRestarts {down_nrestarts} → {now})"
    return f"started again outside SparkOps, by hand or another tool (NRestarts {now}, unchanged: not systemd's own restart)"


def _activating_for(state, unit, *, same_clock=False):
    """How long the unit has been activating: since it left inactive (InactiveExitTimestamp, when
    systemd was read on this box, so its clock is ours), else since the rule first saw it activating.
    Waiting to restart (auto-restart) counts from first sight: InactiveExit is then the last run's."""
    if not unit or unit.get("ActiveState") != "activating":
        state.pop("activating_since", None)
        return 0.0
    began = None
    if same_clock and unit.get("SubState") != "auto-restart":
        began = parse_timestamp(unit.get("InactiveExitTimestamp") or "")
    if began is not None and began.timestamp() <= time.time():
        state["activating_since"] = began.timestamp()
    else:
        state.setdefault("activating_since", time.time())
    return time.time() - state["activating_since"]


def unit_of(engine, reading=None):
    """The engine's unit as the last reading saw it (READING, default the engine's latest)."""
    reading = reading if reading is not None else (engine.latest or {})
    return reading.get("unit") or None


def _last_fatal(engine):
    lines = (engine.latest or {}).get("fatal_lines") or []
    if not lines:
        return ""
    line = lines[-1]
    return ((line.get("message") or "") if isinstance(line, dict) else str(line))[:500]


@register
class RestartLoop(Rule):
    key = "restart_loop"
    title = "Restart loop"
    severity = "warning"
    signal = "engine_polled"
    DEFAULTS: ClassVar[dict] = {"count": 3, "window_s": 3600}
    help = "The unit restarted COUNT times within WINDOW_S (from NRestarts, or the engine's counters going down)."

    def evaluate(self, *, settings, engine, reading: EngineReading, state, **_) -> list[Finding]:
        now = time.time()
        unit = reading.get("unit") or {}
        restarts = [t for t in state.get("restarts", []) if now - t <= settings["window_s"]]
        n = _int(unit.get("NRestarts"))
        if n is not None:
            last = state.get("nrestarts")
            if last is not None and n > last:
                restarts += [now] * min(n - last, 50)
            state["nrestarts"] = n
        elif reading.get("restarted"):
            restarts.append(now)
        state["restarts"] = restarts[-100:]
        active = len(restarts) >= settings["count"]
        message = (
            f"{engine.name} restarted {len(restarts)} times in the last {int(settings['window_s'] / 60)} min"
            f" (NRestarts={n if n is not None else '?'})."
        )
        return [Finding(subject=engine.name, engine=engine, active=active, cause="restart_loop", message=message)]


@register
class PrefixCacheDrop(Rule):
    key = "prefix_cache_drop"
    title = "Prefix-cache hit-rate drop"
    severity = "warning"
    signal = "engine_polled"
    DEFAULTS: ClassVar[dict] = {
        "window_s": 300,
        "min_queries": 1000,
        "drop_points": 20,
        "baseline_s": 3600,
        "for_s": 60,
    }
    help = (
        "The hit rate over WINDOW_S (hits/queries deltas, at least MIN_QUERIES queries) falls DROP_POINTS "
        "percentage points below the engine's own trailing baseline."
    )

    def evaluate(self, *, settings, engine, reading: EngineReading, state, **_) -> list[Finding]:
        queries, hits = reading.get("prefix_cache_queries_total"), reading.get("prefix_cache_hits_total")
        if queries is None or hits is None:
            return []
        now = time.time()
        samples = [s for s in state.get("samples", []) if s[1] <= queries and s[2] <= hits]  # a reset drops history
        samples = [s for s in samples if now - s[0] <= settings["window_s"]] + [[now, queries, hits]]
        state["samples"] = samples
        dq, dh = queries - samples[0][1], hits - samples[0][2]
        if dq < settings["min_queries"] or now - samples[0][0] < settings["window_s"] * 0.5:
            return []
        rate, baseline = dh / dq, state.get("baseline")
        drop = None if baseline is None else (baseline - rate) * 100
        active = drop is not None and drop >= settings["drop_points"]
        if not active:  # the baseline learns only from normal windows, so a long drop cannot become "normal"
            alpha = min(1.0, (now - state.get("baseline_at", now)) / settings["baseline_s"]) or 0.02
            state["baseline"] = rate if baseline is None else baseline + alpha * (rate - baseline)
            state["baseline_at"] = now
        message = (
            f"{engine.name} prefix-cache hit rate {rate:.0%} over the last {int(settings['window_s'] / 60)} min, "
            f"{drop or 0:.0f} points below its baseline {baseline or rate:.0%}; latency climbs when the cache stops hitting."
        )
        return [
            Finding(
                subject=engine.name,
                engine=engine,
                active=active,
                cause="hit_rate_drop",
                message=message,
                details={"rate": rate, "baseline": baseline, "queries": dq},
            )
        ]


@register
class KVSaturated(Rule):
    key = "kv_saturated"
    title = "KV cache saturated"
    severity = "warning"
    signal = "engine_polled"
    DEFAULTS: ClassVar[dict] = {"usage_pct": 95, "for_s": 10}
    help = "KV-cache usage at or above USAGE_PCT: new requests queue or get preempted."

    def evaluate(self, *, settings, engine, reading: EngineReading, **_) -> list[Finding]:
        usage = reading.get("kv_cache_usage")
        if usage is None:
            return []
        active = usage * 100 >= settings["usage_pct"]
        message = (
            f"{engine.name} KV cache {usage:.0%} full ({reading.get('requests_running') or 0} running, "
            f"{reading.get('requests_waiting') or 0} waiting): requests will queue or be preempted."
        )
        return [Finding(subject=engine.name, engine=engine, active=active, cause="kv_full", message=message)]


@register
class QueueGrowing(Rule):
    key = "queue_growing"
    title = "Queue growing"
    severity = "warning"
    signal = "engine_polled"
    DEFAULTS: ClassVar[dict] = {"window_s": 60}
    help = "Waiting requests rose without falling back for WINDOW_S: the engine takes less than it is given."

    def evaluate(self, *, settings, engine, reading: EngineReading, state, **_) -> list[Finding]:
        waiting = reading.get("requests_waiting")
        if waiting is None:
            return []
        now = time.time()
        samples = [s for s in state.get("samples", []) if now - s[0] <= settings["window_s"] * 1.5] + [[now, waiting]]
        state["samples"] = samples
        values = [v for _, v in samples]
        span = now - samples[0][0]
        rising = all(b >= a for a, b in itertools.pairwise(values)) and values[-1] > values[0]
        active = rising and span >= settings["window_s"] and waiting > 0
        message = (
            f"{engine.name} has {waiting} requests waiting, up from {values[0]} over {int(span)} s and still rising."
        )
        return [Finding(subject=engine.name, engine=engine, active=active, cause="queue_rising", message=message)]
