"""Engine rules: down (liveness), restart loop, prefix-cache drop, KV saturated, queue growing, no-restart advisory."""

import itertools
import time
from datetime import datetime
from typing import Any, ClassVar

from dashboard.models import Engine
from dashboard.systemctl_show import parse_timestamp
from sparkops.collectors import unitconfig
from sparkops.collectors.derive import EngineReading
from sparkops.collectors.systemd import UnitProps
from sparkops.collectors.unitnow import Job, UnitNow

from ..finding import Finding
from ..rule_config import RuleSettings
from . import register
from .base import Rule
from .causes import DEFINITIVE, Cause, _int, classify, restart_cause


@register
class EngineDown(Rule):
    key = "engine_down"
    title = "Engine down"
    severity = "critical"
    signal = "engine_liveness"
    DEFAULTS: ClassVar[dict[str, Any]] = {"failures": 2, "activating_budget_s": 600}
    help = (
        "An engine expected up fails its liveness probe twice in a row (the failed probe is re-checked at once). "
        "The alert says why: exit 0 under Restart=on-failure, unit failed, activating too long, active but not "
        "answering, process gone, refused or timeout; it quotes the fatal journal line of the process that died. "
        "A stop or restart asked of systemd pages nothing (past the unit's TimeoutStartSec= it pages as "
        "no_return_after_restart); a crash systemd restarts is one warning (crashed_restarting)."
    )

    def evaluate(
        self,
        *,
        settings: RuleSettings,
        engine: Engine,
        up: bool,
        reason: str = "",
        rechecked: bool = False,
        state: dict[str, Any],
        unit_now: UnitNow | None = None,
        last_up_at: float | None = None,
        box_unreachable_since: datetime | None = None,
        **_: Any,
    ) -> list[Finding]:
        """UNIT_NOW: the engine's unit as the probe read it with this finding
        (`collectors/unitnow.UnitNow`), else what the last host reading said. LAST_UP_AT: when
        (wall seconds, this box) a probe of this worker last found the engine up, if it did.
        BOX_UNREACHABLE_SINCE: set when a worker polls the engine for its box, which stopped
        reporting then (adopted): not answering is then unknown, not down."""
        if not up and box_unreachable_since is not None:
            # A partition and a dead engine look the same from here, and its unit cannot be read:
            # the box's one page (collector_stale) stands for it. Nothing moves until it is back.
            return []
        if up or not engine.expected_up:
            state["failures"] = 0
            down_nrestarts = state.pop("down_nrestarts", None)
            state.pop("activating_since", None)
            if not up:  # no longer expected up: someone stopped it on purpose
                return [Finding(subject=engine.name, engine=engine, active=False, resolution="no longer expected up")]
            _remember_up(state, (unit_now.props if unit_now is not None else None) or unit_of(engine))
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
        # The unit read with this finding knows its process's own journal; the reading's fatal lines may
        # be an earlier process's (a hang quoted the CUDA line of a death three restarts before).
        fatal = unit_now.fatal_line if unit_now is not None and here else _last_fatal(engine)
        job = unit_now.job if unit_now is not None else None
        if here and job is not None and job.requested and _stopped(here):
            if job.op == "stop":  # a stop someone asked systemd for: shown as what it is, paged to nobody
                return [
                    Finding(
                        subject=engine.name, engine=engine, active=False, resolution=f"stopped on request ({job.text})"
                    )
                ]
            if job.pending and here.get("ActiveState") != "failed":  # between a restart's stop and start
                cause = Cause("restarting", f"restarting on request ({job.text})", coming_back=True)
                finding = _down_finding(engine, cause, f"restart ({job.text})", here, "", settings)
                finding.for_s = float("inf")  # past its budget it is no_return_after_restart, fired at once
                return [finding]
        restart = _restart_finding(engine, here, job, state, fatal, settings, last_up_at) if here else None
        if restart is not None:
            return [restart]
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
            seen_up=bool(unit and unit.get("InvocationID") and unit.get("InvocationID") == state.get("up_invocation")),
            again=_again(engine),
        )
        if job is not None and job.pending and (here or {}).get("ActiveState") == "failed":  # its start failed
            cause = Cause("no_return_after_restart", f"it did not come back after a restart ({job.text}): {cause.text}")
        return [_down_finding(engine, cause, reason, unit, fatal, settings, activating_for)]


def _down_finding(
    engine: Engine,
    cause: Cause,
    reason: str,
    unit: UnitProps | None,
    fatal: str,
    settings: RuleSettings,
    activating_for: float = 0.0,
    **extra: Any,
) -> Finding:
    message = f"{engine.name} is down: {cause.text}."
    if fatal and fatal not in cause.text:
        message += f" Last fatal line: {fatal}"
    # Starting or auto-restarting: wait out the activation budget before paging.
    wait = max(0.0, settings["activating_budget_s"] - activating_for) if cause.coming_back else 0.0
    return Finding(
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
        **extra,
    )


def _remember_up(state: dict[str, Any], unit: UnitProps | None) -> None:
    """Which run of the unit answered (its InvocationID and systemd's restart count then): a later
    death followed by another run is a restart, and NRestarts tells whose."""
    if unit and unit.get("ActiveState") == "active" and unit.get("InvocationID"):
        state["up_invocation"] = unit["InvocationID"]
        state["up_nrestarts"] = _int(unit.get("NRestarts"))


def _stopped(unit: UnitProps) -> bool:
    return unit.get("ActiveState") in ("inactive", "deactivating", "failed")


def _restart_finding(
    engine: Engine,
    unit: UnitProps,
    job: Job | None,
    state: dict[str, Any],
    fatal: str,
    settings: RuleSettings,
    last_up_at: float | None = None,
) -> Finding | None:
    """The finding for an engine whose unit (read now, on its own box) runs or starts a process
    other than the one that last answered: a restart. Whose it was is systemd's to say: NRestarts
    counts only its own (Restart=), the journal's job messages the ones asked of it. Within the
    unit's start budget a restart someone asked for pages nothing (a pending alert that the
    engine's return deletes) and a crash systemd restarts is one warning; past the budget, one
    page: it did not come back. None when the unit does not run a new process."""
    active, sub = unit.get("ActiveState"), unit.get("SubState")
    invocation, before = unit.get("InvocationID"), state.get("up_invocation")
    began = parse_timestamp(unit.get("ExecMainStartTimestamp") or unit.get("InactiveExitTimestamp") or "")
    # A run that began after the engine last answered has never answered: it is starting.
    new_run = (
        bool(invocation and before and invocation != before)
        or (job is not None and job.pending)
        or (began is not None and last_up_at is not None and began.timestamp() > last_up_at)
    )
    declared_ready = unit.get("StartPost") or (unit.get("Type") or "").startswith("notify")
    if sub != "auto-restart" and (active != "active" or not new_run or declared_ready):
        # Starting (its gate runs): the activation budget's rule; declared ready by a gate or
        # sd_notify and not answering: readiness lied (classify), whoever restarted it.
        return None
    was, now = state.get("up_nrestarts"), _int(unit.get("NRestarts"))
    by_systemd = sub == "auto-restart" or (was is not None and now is not None and now > was)
    planned = not by_systemd and (job is None or job.requested)
    if planned:
        job_text = job.asked_text("restart") if job is not None else "systemctl restart"
    else:
        counted = was is not None and now is not None and now > was
        job_text = f"Restart={unit.get('Restart') or '?'}" + (f", NRestarts {was} → {now}" if counted else "")
    budget = unitconfig.timespan_s(unit.get("TimeoutStartUSec") or "")
    if budget is None or budget == float("inf") or budget <= 0:
        budget = float(settings["activating_budget_s"])
    if sub == "auto-restart" or began is None or began.timestamp() > time.time():
        state.setdefault("restart_seen_at", time.time())
        began_s = state["restart_seen_at"]
    else:
        began_s = began.timestamp()
        state.pop("restart_seen_at", None)
    age = max(0.0, time.time() - began_s)
    cause = restart_cause(job_text=job_text, planned=planned, age_s=age, budget_s=budget, fatal=fatal)
    finding = _down_finding(
        engine,
        cause,
        f"restart ({job_text})",
        unit,
        "" if planned else fatal,
        settings,
        severity="warning" if cause.key == "crashed_restarting" else None,
    )
    if cause.coming_back:
        # One warning now for a crash; a planned restart never fires by waiting: past its budget
        # the cause becomes no_return_after_restart, which fires at once.
        finding.fire_now = cause.key == "crashed_restarting"
        finding.for_s = 0.0 if finding.fire_now else float("inf")
    return finding


def _again(engine: Engine) -> str:
    """The command that brings ENGINE's failed unit back, as it would be pasted."""
    if not engine.unit:
        return ""
    ctl = "systemctl --user" if engine.unit_scope == "user" else "systemctl"
    return f"{ctl} reset-failed {engine.unit} && {ctl} start {engine.unit}"


def _restarted_by(engine: Engine, down_nrestarts: int, unit_now: UnitNow | None = None) -> str:
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


def _activating_for(state: dict[str, Any], unit: UnitProps | None, *, same_clock: bool = False) -> float:
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


def unit_of(engine: Engine, reading: EngineReading | None = None) -> UnitProps | None:
    """The engine's unit as the last reading saw it (READING, default the engine's latest)."""
    if reading is None:
        latest: dict[str, Any] = engine.latest or {}  # stored JSON, an EngineReading when written
        return latest.get("unit") or None
    return reading.get("unit") or None


def _last_fatal(engine: Engine) -> str:
    lines = (engine.latest or {}).get("fatal_lines") or []
    if not lines:
        return ""
    line = lines[-1]
    return ((line.get("message") or "") if isinstance(line, dict) else str(line))[:500]


@register
class RestartLoop(Rule):
    key = "restart_loop"
    title = "Restart loop"
    # Each crash systemd restarts is one warning (engine_down's crashed_restarting); the Nth within
    # the window pages: the engine is not serving, whatever systemd keeps doing.
    severity = "critical"
    signal = "engine_polled"
    DEFAULTS: ClassVar[dict[str, Any]] = {"count": 3, "window_s": 3600}
    help = "The unit restarted COUNT times within WINDOW_S (from NRestarts, or the engine's counters going down)."

    def evaluate(
        self, *, settings: RuleSettings, engine: Engine, reading: EngineReading, state: dict[str, Any], **_: Any
    ) -> list[Finding]:
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
    DEFAULTS: ClassVar[dict[str, Any]] = {
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

    def evaluate(
        self, *, settings: RuleSettings, engine: Engine, reading: EngineReading, state: dict[str, Any], **_: Any
    ) -> list[Finding]:
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
    DEFAULTS: ClassVar[dict[str, Any]] = {"usage_pct": 95, "for_s": 10}
    help = "KV-cache usage at or above USAGE_PCT: new requests queue or get preempted."

    def evaluate(self, *, settings: RuleSettings, engine: Engine, reading: EngineReading, **_: Any) -> list[Finding]:
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
    DEFAULTS: ClassVar[dict[str, Any]] = {"window_s": 60}
    help = "Waiting requests rose without falling back for WINDOW_S: the engine takes less than it is given."

    def evaluate(
        self, *, settings: RuleSettings, engine: Engine, reading: EngineReading, state: dict[str, Any], **_: Any
    ) -> list[Finding]:
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
