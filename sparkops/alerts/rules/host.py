"""Host rules: GPU clock stuck low, memory pressure, compile storm, kernel fault; collector stale (beat)."""

import re
import time
from collections.abc import Mapping
from datetime import UTC, timedelta
from typing import Any, ClassVar

from dashboard.clock import db_now, report_limit, report_overdue, skew_text
from dashboard.dbgate import database_back_at
from dashboard.models import Host

from ..finding import Finding
from ..rule_config import RuleSettings, rule_settings
from . import register
from .base import Rule

GIB = 1024**3
# Throttle reasons that explain a low clock (then it is not "stuck").
EXPLAINING = {
    "sw_power_cap",
    "hw_slowdown",
    "hw_thermal_slowdown",
    "sw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "power_cap",
    "thermal",
}


@register
class GpuClockStuckLow(Rule):
    key = "gpu_clock_stuck_low"
    title = "GPU clock stuck low"
    severity = "warning"
    signal = "host_polled"
    DEFAULTS: ClassVar[dict[str, Any]] = {"util_pct": 80, "clock_ratio_pct": 50, "for_s": 60}
    help = (
        "Utilisation ≥ UTIL_PCT, P-state P0, SM clock ≤ CLOCK_RATIO_PCT of its maximum and no throttle reason "
        "that explains it, sustained FOR_S."
    )

    def evaluate(self, *, settings: RuleSettings, host: Host, reading: Mapping[str, Any], **_: Any) -> list[Finding]:
        return [self.one(settings, host, gpu) for gpu in reading.get("gpus") or [] if gpu.get("index") is not None]

    def one(self, settings: RuleSettings, host: Host, gpu: Mapping[str, Any]) -> Finding:
        clock, top, util = gpu.get("sm_clock_mhz"), gpu.get("sm_clock_max_mhz"), gpu.get("utilization_pct")
        reasons = {r.lower() for r in gpu.get("clocks_event_reasons") or []}
        active = (
            clock is not None
            and top is not None
            and util is not None
            and top > 0
            and util >= settings["util_pct"]
            and gpu.get("pstate") == "P0"
            and clock <= top * settings["clock_ratio_pct"] / 100
            and not reasons & EXPLAINING
        )
        message = (
            f"GPU {gpu['index']} on {host.name} runs at {clock} MHz of {top} MHz while {util}% busy in P0 with no "
            f"throttle reason: throughput is lost. Healthy is near the maximum (e.g. 2,400–2,500 MHz on GB10). "
            f"The known recovery is a full power disconnect (not a reboot)."
        )
        return Finding(
            subject=f"{host.name}/gpu{gpu['index']}",
            host=host,
            active=active,
            cause="clock_stuck_low",
            message=message,
            details={"sm_clock_mhz": clock, "sm_clock_max_mhz": top, "reasons": sorted(reasons)},
        )


def _psi(host_reading: Mapping[str, Any], resource: str, kind: str, avg: str) -> float | None:
    try:
        return float(host_reading["psi"][resource][kind][avg])
    except (KeyError, TypeError, ValueError):
        return None


@register
class MemoryPressure(Rule):
    key = "memory_pressure"
    title = "Memory pressure"
    severity = "warning"
    signal = "host_polled"
    DEFAULTS: ClassVar[dict[str, Any]] = {
        "full_avg10_pct": 5,
        "some_avg60_pct": 20,
        "available_pct": 5,
        "swap_growth_mib": 1024,
        "swap_window_s": 300,
        "for_s": 30,
    }
    help = (
        "PSI memory full avg10 ≥ FULL_AVG10_PCT or some avg60 ≥ SOME_AVG60_PCT, or MemAvailable under "
        "AVAILABLE_PCT of total, or swap grew SWAP_GROWTH_MIB within SWAP_WINDOW_S; sustained FOR_S."
    )

    def evaluate(
        self, *, settings: RuleSettings, host: Host, reading: Mapping[str, Any], state: dict[str, Any], **_: Any
    ) -> list[Finding]:
        h = reading.get("host") or {}
        full, some = _psi(h, "memory", "full", "avg10"), _psi(h, "memory", "some", "avg60")
        total, avail = h.get("mem_total_bytes"), h.get("mem_available_bytes")
        growth = self.swap_growth(settings, state, h.get("swap_used_bytes"))
        why = []
        if full is not None and full >= settings["full_avg10_pct"]:
            why.append(f"PSI memory full avg10 {full:.1f}%")
        if some is not None and some >= settings["some_avg60_pct"]:
            why.append(f"PSI memory some avg60 {some:.1f}%")
        if total and avail is not None and avail < total * settings["available_pct"] / 100:
            why.append(f"MemAvailable {avail / GIB:.1f} GiB of {total / GIB:.0f} GiB")
        if growth is not None and growth >= settings["swap_growth_mib"] * 1024**2:
            why.append(f"swap grew {growth / GIB:.1f} GiB in {int(settings['swap_window_s'] / 60)} min")
        message = f"{host.name} is under memory pressure: {', '.join(why) or 'none now'}."
        return [
            Finding(
                subject=host.name,
                host=host,
                active=bool(why),
                cause="memory_pressure",
                message=message,
                details={"psi_full_avg10": full, "psi_some_avg60": some, "mem_available_bytes": avail},
            )
        ]

    @staticmethod
    def swap_growth(settings: RuleSettings, state: dict[str, Any], used: float | None) -> float | None:
        if used is None:
            return None
        now = time.time()
        samples = [s for s in state.get("swap", []) if now - s[0] <= settings["swap_window_s"]] + [[now, used]]
        state["swap"] = samples
        return used - min(v for _, v in samples)


@register
class CompileStorm(Rule):
    key = "compile_storm"
    title = "Compile storm"
    severity = "critical"
    signal = "host_polled"
    DEFAULTS: ClassVar[dict[str, Any]] = {"count": 6, "rss_pct": 25}
    help = (
        "COUNT or more compiler processes (cicc, nvcc, ptxas, cc1plus, ninja…) alive, or their RSS ≥ RSS_PCT of RAM: "
        "fires before the OOM killer, names them and who spawned them."
    )

    def evaluate(self, *, settings: RuleSettings, host: Host, reading: Mapping[str, Any], **_: Any) -> list[Finding]:
        procs = reading.get("processes") or {}
        count, rss = procs.get("compilers") or 0, procs.get("compilers_rss_bytes") or 0
        total = (reading.get("host") or {}).get("mem_total_bytes") or 0
        active = count >= settings["count"] or (total > 0 and rss >= total * settings["rss_pct"] / 100)
        spawners = sorted({p.get("unit") or p.get("parent") or "?" for p in procs.get("compiler_procs") or []})
        names = ", ".join(f"{p.get('name')}[{p.get('pid')}]" for p in (procs.get("compiler_procs") or [])[:12])
        message = (
            f"{count} compiler processes on {host.name} using {rss / GIB:.1f} GiB"
            + (f" ({rss / total:.0%} of RAM)" if total else "")
            + f": {names or 'unnamed'}; spawned by "
            f"{', '.join(spawners) or 'unknown'}. Cap MAX_JOBS and NVCC_THREADS on every launch path "
            "(unit Environment=, scripts, containers) before a cold JIT cache takes the box down."
        )
        return [
            Finding(
                subject=host.name,
                host=host,
                active=active,
                cause="compile_storm",
                message=message,
                details={"count": count, "rss_bytes": rss, "spawners": spawners},
            )
        ]


KERNEL_FAULTS = re.compile(
    r"NV_ERR_NO_MEMORY|NVRM: Xid|\bXid\b|Out of memory: Killed process|oom-kill|invoked oom-killer", re.IGNORECASE
)


@register
class KernelFault(Rule):
    key = "kernel_fault"
    title = "Kernel fault"
    severity = "critical"
    signal = "host_polled"
    DEFAULTS: ClassVar[dict[str, Any]] = {"clear_after_s": 900}
    help = "Kernel journal lines with NV_ERR_NO_MEMORY, an Xid, or an OOM kill; clears after CLEAR_AFTER_S without one."

    def evaluate(
        self, *, settings: RuleSettings, host: Host, reading: Mapping[str, Any], state: dict[str, Any], **_: Any
    ) -> list[Finding]:
        lines = [_text(line) for line in reading.get("kernel_lines") or []]
        hits = [line for line in lines if KERNEL_FAULTS.search(line)]
        now = time.time()
        if hits:
            state["last_seen"], state["last_line"] = now, hits[-1][:500]
        last = state.get("last_seen")
        active = last is not None and now - last < settings["clear_after_s"]
        message = f"Kernel on {host.name}: {state.get('last_line', '')}"
        return (
            [
                Finding(
                    subject=host.name,
                    host=host,
                    active=active,
                    cause=_kind(state.get("last_line", "")),
                    message=message,
                )
            ]
            if last is not None
            else []
        )


def _text(line: object) -> str:
    return line.get("message", "") if isinstance(line, dict) else str(line)


def _kind(line: str) -> str:
    low = line.lower()
    return "oom_kill" if "oom" in low or "out of memory" in low else "nv_err_no_memory" if "nv_err" in low else "xid"


@register
class CollectorStale(Rule):
    key = "collector_stale"
    title = "Collector stale"
    severity = "critical"
    signal = "beat"
    DEFAULTS: ClassVar[dict[str, Any]] = {"intervals": 3}
    help = (
        "A host's worker has not reported for INTERVALS poll intervals plus its store interval "
        "(SPARKOPS_FLUSH_INTERVAL; checked by the fleet's leading worker every 5 s, and by a beat backstop every 30 s)."
    )

    def evaluate(self, *, settings: RuleSettings, **_: Any) -> list[Finding]:

        now = db_now()  # the reports are stamped with the database's clock: judge them by it
        # One judgement with the controls' (poller.fleet.box_reachable): what pages a box refuses its restarts.
        limit = report_limit(settings["intervals"])
        findings = []
        back = database_back_at()  # no box could report while the database was away: count from its return
        for host in Host.objects.filter(last_report_at__isnull=False):
            reported = host.last_report_at
            if reported is None:  # filtered out above; for the type checker
                continue
            age = (now - reported).total_seconds()
            findings.append(
                Finding(
                    subject=f"{host.name}/collector",
                    host=host,
                    active=report_overdue(reported, now=now, limit=limit, back=back),
                    cause="no_report",
                    message=f"Box {host.name} unreachable since {reported.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC "
                    f"(its worker, queue host.{host.name}, last reported {int(age)} s ago): its engines' state is "
                    "unknown. This page stands for them: they page nothing of their own until it reports again.",
                )
            )
        return findings


def stale_limit() -> timedelta:
    """How long a box's worker may go without storing its report before the box is unreachable:
    `report_limit` at collector_stale's INTERVALS as the operator set it. The rule pages at it, and
    the controls (poller.fleet.box_reachable) and the Hosts grid (selectors.fleet) judge by it."""
    return report_limit(float(rule_settings(CollectorStale)["intervals"]))


@register
class ClockSkew(Rule):
    key = "clock_skew"
    title = "Clock skew"
    severity = "warning"
    signal = "host_polled"
    help = (
        "The host's worker's clock is off the database's by more than SPARKOPS_CLOCK_SKEW_MAX_S (measured each time "
        "it stores its report). The times others compare come from the database's clock anyway; its own stamps "
        "(sample times) and timers are off by as much."
    )

    def evaluate(self, *, host: Host, reading: Mapping[str, Any], **_: Any) -> list[Finding]:

        offset = reading.get("clock_offset_s") if isinstance(reading, dict) else None
        if offset is None:
            return []
        text = skew_text(f"host {host.name}", offset)
        return [
            Finding(
                subject=f"{host.name}/clock",
                host=host,
                active=bool(text),
                cause="clock_skew",
                message=(text[0].upper() + text[1:] + ".") if text else "",
                fire_now=True,
            )
        ]
