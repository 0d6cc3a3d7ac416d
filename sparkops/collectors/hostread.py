"""One host reading: memory, PSI, GPUs, compiler processes, and the engines' units and
journal. Runs on the host itself (that box's worker's resident poller). Every source fails alone."""

import time
from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

from sparkops.collectors import contract, gpu, processes, systemd
from sparkops.collectors import host as hostsrc
from sparkops.collectors.systemd import UnitEngine, UnitProps

JOURNAL_EVERY_S = 10.0  # and at once when a unit's state moved: the journal says *why*
# After a process scan that found no compiler, the next one comes this much later: a compile
# storm builds over minutes, and the scan (every /proc/<pid>/stat) is a tenth of a tick's CPU.
# While compilers run, every tick scans.
IDLE_SCAN_S = 6.0
KEEP_FATAL = 20


class HostRead(NamedTuple):
    """One reading of a host's sources."""

    reading: dict  # {"host", "gpus", "gpu_state", "processes", "kernel_lines", "units"}: `poll --json`'s host part
    values: dict  # {metric: number} for the sample store
    unit_infos: dict  # {engine id: {"unit", "fatal_lines", "boot"}}
    state: dict  # the host's new collector state


def host_read(*, engines: Collection[UnitEngine], state: dict[str, Any], now: float | None = None) -> HostRead:
    """Read the host's sources (a `HostRead`).

    reading: {"host", "gpus", "gpu_state", "processes", "kernel_lines", "units"} (the
    `poll --json` host part); values: {metric: number} for the sample store; unit_infos:
    {engine_id: {"unit", "fatal_lines", "boot"}}."""
    now = now or time.time()
    new_state = dict(state)
    host = _memory()
    host["psi"], host["psi_error"] = hostsrc.read_psi()
    stall, new_state["psi"] = hostsrc.psi_stall_rates(host["psi"], state.get("psi") or {}, now)
    gpu_state, gpus = gpu.read_gpus()
    procs = _compilers(state, new_state, now)
    units = _units(engines)
    unit_infos, kernel_lines = _journal(engines, units, state, new_state, now)
    reading = {
        "host": host,
        "gpus": gpus,
        "gpu_state": gpu_state,
        "processes": procs,
        "kernel_lines": kernel_lines,
        "units": units,
        "journal_errors": {k[14:]: v for k, v in new_state.items() if k.startswith("journal_error_")},
    }
    return HostRead(reading, {**_values(host, gpus, procs), **stall}, unit_infos, new_state)


def _memory() -> dict[str, Any]:
    try:
        return dict(hostsrc.read_memory())
    except (OSError, RuntimeError, ValueError) as exc:
        return {
            "mem_total_bytes": None,
            "mem_available_bytes": None,
            "mem_used_bytes": None,
            "swap_total_bytes": None,
            "swap_used_bytes": None,
            "mem_error": str(exc)[:200],
        }


def _compilers(state: Mapping[str, Any], new_state: dict[str, Any], now: float) -> processes.Compilers:
    quiet_since = state.get("no_compilers_at")
    if quiet_since is not None and 0 <= now - quiet_since < IDLE_SCAN_S:
        return {"compilers": 0, "compilers_rss_bytes": 0, "compiler_procs": [], "error": None}
    procs = processes.read_compilers()
    if procs["compilers"] == 0:
        new_state["no_compilers_at"] = now
    else:
        new_state.pop("no_compilers_at", None)
    return procs


def _units(engines: Collection[UnitEngine]) -> dict[str, UnitProps]:
    units: dict[str, UnitProps] = {}
    for scope in ("system", "user"):
        names = sorted({e.unit for e in engines if e.unit and e.unit_scope == scope})
        for name, props in systemd.units_show(names, scope=scope).items():
            if "error" not in props:
                props["cgroup"] = hostsrc.read_cgroup(props.get("ControlGroup"))
            units[name] = props
    return units


def _journal_due(
    units: Mapping[str, UnitProps], state: Mapping[str, Any], now: float
) -> tuple[bool, dict[str, list[Any]]]:
    signature = {u: [p.get("ActiveState"), p.get("MainPID"), p.get("NRestarts")] for u, p in units.items()}
    moved = signature != state.get("unit_signature")
    return moved or now - state.get("journal_t", 0) >= JOURNAL_EVERY_S, signature


def _journal(
    engines: Collection[UnitEngine],
    units: Mapping[str, UnitProps],
    state: Mapping[str, Any],
    new_state: dict[str, Any],
    now: float,
) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
    due, new_state["unit_signature"] = _journal_due(units, state, now)
    infos: dict[int, dict[str, Any]] = {
        e.pk: {"unit": units.get(e.unit), "fatal_lines": [], "boot": {}} for e in engines if e.unit
    }
    new_state["contract"] = {u: dict(v) for u, v in (state.get("contract") or {}).items()}
    previous = state.get("fatal") or {}
    kernel_lines = list(state.get("kernel_lines") or [])
    if due:
        new_state["journal_t"] = now
        for source in ("units", "kernel"):
            kernel_lines += _journal_source(source, engines, state, new_state, previous)
    by_unit = {e.unit: e.pk for e in engines if e.unit}
    for unit, lines in previous.items():
        if by_unit.get(unit) in infos:
            infos[by_unit[unit]]["fatal_lines"] = lines[-KEEP_FATAL:]
    for unit, facts in (new_state.get("boot") or {}).items():
        if by_unit.get(unit) in infos:
            infos[by_unit[unit]]["boot"] = facts
    new_state["contract"] = contract.journal_prune(new_state["contract"], now=now)
    for unit, pk in by_unit.items():
        if pk in infos:
            infos[pk]["contract"] = contract.journal_summary(new_state["contract"].get(unit))
    new_state["fatal"] = {u: lines[-KEEP_FATAL:] for u, lines in previous.items()}
    new_state["kernel_lines"] = kernel_lines[-KEEP_FATAL:]
    return infos, new_state["kernel_lines"]


def _reanchor(which: dict[str, Any], key: str, state: Mapping[str, Any], new_state: dict[str, Any]) -> str:
    """A cursor journalctl rejects (a rotated or vacuumed journal) would fail every poll from
    now on: resume at the newest entry instead. Re-reading from the start would repeat fatal
    lines already reported; what was logged in between is lost either way."""
    if not state.get(key):
        return ""
    try:
        _, new_state[key] = systemd.journal_read(**which, first_lines=1)
    except systemd.CommandError:
        return ""
    return "; the kept cursor was dropped, reading resumes at the newest entry"


def _journal_source(
    source: str,
    engines: Collection[UnitEngine],
    state: Mapping[str, Any],
    new_state: dict[str, Any],
    fatal: dict[str, list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    units = sorted({e.unit for e in engines if e.unit and e.unit_scope == "system"})
    user_units = sorted({e.unit for e in engines if e.unit and e.unit_scope == "user"})
    key = f"cursor_{source}"
    which: dict[str, Any] = {"kernel": True} if source == "kernel" else {"units": units, "user_units": user_units}
    try:
        entries, new_state[key] = systemd.journal_read(**which, cursor=state.get(key))
    except systemd.CommandError as exc:
        new_state[f"journal_error_{source}"] = str(exc) + _reanchor(which, key, state, new_state)
        return []
    new_state.pop(f"journal_error_{source}", None)
    boot = dict(new_state.get("boot") or {})
    kernel: list[dict[str, Any]] = []  # systemd.fatal_line's
    now = time.time()
    for entry in entries:
        signature, facts = systemd.classify(entry)
        unit = systemd.entry_unit(entry)
        if source == "units":
            contract.journal_note(new_state["contract"], unit, entry, systemd.message(entry), now=now)
        if facts and unit:
            boot[unit] = {**boot.get(unit, {}), **facts}
        if signature:
            line = systemd.fatal_line(entry, signature)
            (kernel if source == "kernel" else fatal.setdefault(unit or "?", [])).append(line)
    new_state["boot"] = boot
    return kernel


def _values(host: Mapping[str, Any], gpus: list[gpu.Gpu], procs: Mapping[str, Any]) -> dict[str, float | None]:
    values = {k: host.get(k) for k in ("mem_available_bytes", "mem_used_bytes", "swap_used_bytes")}
    for res, kinds in (host.get("psi") or {}).items():
        for kind, nums in kinds.items():
            values[f"psi.{res}.{kind}.avg10"] = nums.get("avg10")
            values[f"psi.{res}.{kind}.avg60"] = nums.get("avg60")
    values["compilers"] = procs.get("compilers")
    values["compilers_rss_bytes"] = procs.get("compilers_rss_bytes")
    for g in gpus:
        for key in ("sm_clock_mhz", "sm_clock_max_mhz", "utilization_pct", "power_w", "temperature_c"):
            values[f"gpu{g['index']}.{key}"] = g.get(key)
    return values
