"""The drop-in each launch-audit check needs (`sparkops unit fix`, sparkops/controls/unitfix.py): the
settings of a per-engine check from the engine's snapshot and the box's thresholds, the ordering edge of
the two ordering checks from the box's live engine units, and whether a later file would override it."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import psutil
from django.conf import settings

from sparkops.audit.base import sparkops_executable
from sparkops.audit.checks import GOOD_FILE_STATES, RESTART_DROPIN
from sparkops.collectors.unitconfig import memory_bytes
from sparkops.controls.runtime import stop_socket
from sparkops.gate.waitready import START_MARGIN_S

if TYPE_CHECKING:
    from dashboard.models import Engine
    from sparkops.audit.base import Result

Setting = tuple[str, str, str]  # (section, key, value) of a drop-in
Snapshots = Sequence[tuple["Engine", "dict[str, Any] | None"]]  # audit.run.snapshots_of: stored JSON
Settings = tuple["list[Setting] | None", str]  # (what to set or None: no fix, why / the note)


class DropIn(Protocol):
    """What `overridden` reads of a drop-in (unitfix.Fix, which imports this module)."""

    @property
    def file(self) -> str: ...
    @property
    def settings(self) -> list[Setting]: ...


BUDGET_FACTOR = 1.5  # a cold start's budget: the slowest measured cold start and half again
BUDGET_MIN_S = 60
BUDGET_UNMEASURED_S = 900  # no start measured yet: systemd's own default TimeoutStartSec is 90 s, far too short
MEMORY_MAX_SHARE = 0.875  # of the box's memory: 112G on a 128 GiB box (docs/field-notes.md §4)
CAPS = ("MAX_JOBS", "NVCC_THREADS", "TORCHINDUCTOR_COMPILE_THREADS", "FLASHINFER_NVCC_THREADS")
NO_FIX = {
    "memory_share_sum": "lower --gpu-memory-utilization / --mem-fraction-static in the engines' flags (not a drop-in)",
    "running_matches_unit": "`systemctl daemon-reload` and restart the unit: a drop-in would not change what runs",
}


def env_value(name: str, value: object) -> str:
    """One Environment= assignment, quoted where systemd needs it."""
    pair = f"{name}={value}"
    if any(c.isspace() or c in "\"'\\" for c in pair):
        return '"' + pair.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return pair


def readiness_budget_s(engine: Engine) -> tuple[int, str]:
    """(budget s, how it was found): the slowest measured cold start (else any start) and half again."""
    from sparkops.launch.starts import restart_budget

    classes = restart_budget(engine)["classes"]
    basis = classes.get("cold") or classes.get("warm")
    if not basis:
        return BUDGET_UNMEASURED_S, f"no start of {engine.name} measured yet: {BUDGET_UNMEASURED_S} s"
    kind = "cold" if classes.get("cold") else "warm (no cold start measured)"
    budget = max(BUDGET_MIN_S, math.ceil(basis["max"] * BUDGET_FACTOR))
    return budget, f"slowest {kind} start {basis['max']:.0f} s of {basis['n']} × {BUDGET_FACTOR:g} = {budget} s"


def memory_total() -> int:
    """The box's memory in bytes (its /proc/meminfo under SPARKOPS_PROC_ROOT, else psutil)."""
    try:
        for line in (Path(settings.SPARKOPS_PROC_ROOT) / "meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass

    return psutil.virtual_memory().total


def engine_settings(engine: Engine, data: Mapping[str, Any] | None, check: str, s: Mapping[str, Any]) -> Settings:
    """[(section, key, value)], note for a per-engine check; or (None, why) when none fits."""
    u = (data or {}).get("unit") or {}
    env = (data or {}).get("environment") or {}
    if check == "restart_always_bounded":
        burst = min(3, s["max_burst"])
        items = [
            (sect, k, str(burst) if k == "StartLimitBurst" else v)
            for sect, kv in RESTART_DROPIN.sections
            for k, v in kv
        ]
        return items, "StartLimit* belong in [Unit]: a crash loop ends failed, visible, instead of looping."
    if check == "compile_caps":
        items = []
        for name in CAPS:
            cap, value = s[name.lower()], env.get(name)
            if value is None or not str(value).isdigit() or int(value) > cap:
                items.append(("Service", "Environment", env_value(name, cap)))
        return items, "Only the caps unset or above the audit's thresholds; a lower value already set is kept."
    if check == "cuda_on_path":
        cuda_bin = s["cuda_bin"].rstrip("/")
        path = env.get("PATH") or "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
        items = []
        if cuda_bin not in [p.rstrip("/") for p in path.split(":")]:
            items.append(("Service", "Environment", env_value("PATH", f"{cuda_bin}:{path}")))
        if not env.get("CUDA_HOME"):
            home = cuda_bin[: -len("/bin")] if cuda_bin.endswith("/bin") else os.path.dirname(cuda_bin)
            items.append(("Service", "Environment", env_value("CUDA_HOME", home)))
        return items, ""
    if check == "readiness_budget":
        budget, basis = readiness_budget_s(engine)
        margin = max(s["margin_s"], math.ceil(START_MARGIN_S))  # the gate refuses a budget inside its own margin
        helper = f"{sparkops_executable()} wait-ready --url {engine.url} --kind {engine.kind} --budget {budget}"
        items = [
            ("Service", "ExecStartPost", ""),  # resets the helpers before: two would add their waits
            ("Service", "ExecStartPost", helper),
            ("Service", "TimeoutStartSec", str(budget + margin)),
        ]
        return items, f"Budget: {basis}; TimeoutStartSec = budget + the audit's margin {margin} s."
    if check == "stop_hook":
        path = stop_socket().replace("%", "%%")  # the box's own worker's (runtime.py); systemd expands %
        # This installation's Python on the hook's own module: ~50 ms a stop, where the `sparkops`
        # console script would first import the sparkops package (Celery: ~200 ms more).
        hook = f"{sys.executable} -m sparkops.controls.stopped --socket {path} %n"
        return [("Service", "ExecStopPost", hook)], (
            "The unit's stop, with systemd's Result= and exit status, told to the box's worker as one datagram "
            "(it exits 0 whatever happens: a stop never fails for it)."
        )
    if check == "memory_max_set":
        total, gib = memory_total(), 1 << 30
        cap = math.floor(total * MEMORY_MAX_SHARE / gib)
        high = memory_bytes(u.get("memory_high"))
        if high is not None:
            cap = max(cap, math.ceil(high / gib) + 1)
        cap = min(cap, max(1, math.floor(total / gib)))
        return [("Service", "MemoryMax", f"{cap}G")], (
            f"{MEMORY_MAX_SHARE:g} of the box's {total / gib:.0f} GiB: the unit is killed before the box is."
        )
    return None, NO_FIX.get(check, "no mechanical fix")


def _peers(engine: Engine, snaps: Snapshots) -> list[tuple[Engine, str]]:
    """Live engine units ENGINE may order after: same box and scope, loaded and enabled, sorting before
    it by name (every edge the fixes add goes from a later name to an earlier one: never a cycle), and
    not already ordered after ENGINE. [(peer engine, its unit)], nearest name first."""
    mine = ((dict(snaps).get(engine) or {}).get("unit") or {}).get("unit")
    out: list[tuple[Engine, str]] = []
    for peer, data in snaps:
        u = (data or {}).get("unit") or {}
        if peer.pk == engine.pk or not u.get("unit") or peer.unit_scope != engine.unit_scope:
            continue
        if peer.name >= engine.name or mine in ((u.get("edges") or {}).get("After") or []):
            continue
        if u.get("load_state") != "loaded" or (u.get("unit_file_state") or "") not in GOOD_FILE_STATES:
            continue
        out.append((peer, u["unit"]))
    return sorted(out, key=lambda p: p[0].name, reverse=True)


def _live(state: Mapping[str, Any]) -> bool:
    return state.get("LoadState") in ("loaded", None, "") and (state.get("UnitFileState") or "") in GOOD_FILE_STATES


def ordering_settings(engine: Engine, result: Result, snaps: Snapshots) -> Settings:
    u = (dict(snaps).get(engine) or {}).get("unit") or {}
    have = set((u.get("edges") or {}).get("After") or [])
    peers = [p for p in _peers(engine, snaps) if p[1] not in have]
    if result.check == "after_enabled_units":
        if not peers:
            return None, (
                "no live engine unit to order after (one of the box's, loaded and enabled, that sorts before "
                f"{engine.name}); remove the stale edge from the file that sets it"
            )
        peer, unit = peers[0]
        files = ", ".join((u.get("edge_files") or {}).get("After") or [])
        states = u.get("edge_states") or {}
        stale = [n for n in (u.get("edges") or {}).get("After") or [] if not _live(states.get(n) or {})]
        return [("Unit", "After", unit)], (
            f"Orders {engine.unit} after {peer.name}'s live unit {unit}, so their cold starts serialize. "
            f"The stale edge to {' '.join(stale) or 'the dead unit'} stays where it is set ({files}): "
            "a drop-in cannot take an After= back."
        )
    names = [n.strip() for n in result.subject.split(" + ")]
    other = next((n for n in names if n != engine.name), None)
    match = [p for p in peers if p[0].name == other]
    if not match:
        return None, (
            f"the edge goes on {other}'s unit (the later name orders after the earlier): "
            f"`sparkops unit fix {other} --check cold_starts_serialized`"
            if other and other > engine.name
            else f"{other}'s unit is not a live unit of the same scope to order after"
        )
    return [
        ("Unit", "After", match[0][1])
    ], f"{engine.unit} starts after {other}'s {match[0][1]}: one cold start at a time."


def overridden(data: Mapping[str, Any] | None, fix: DropIn) -> str | None:
    """Why FIX would not take effect (a later drop-in, or an EnvironmentFile, sets the same), or None."""
    u = (data or {}).get("unit") or {}
    env_files = {f.get("path") for f in u.get("environment_files") or []}
    origins = (data or {}).get("environment_origins") or {}
    directive_files = u.get("directive_files") or {}
    for _sect, key, value in fix.settings:
        if key == "Environment":
            name = value.strip('"').partition("=")[0]
            origin = origins.get(name)
            if origin in env_files:
                return f"{name} is set in the EnvironmentFile {origin}, which overrides Environment=: change it there"
            where = origin
        elif key in ("After", "ExecStartPost"):
            if key == "ExecStartPost":
                posts = u.get("exec_start_post") or []
                where = (posts[-1] or {}).get("file") if posts else None
            else:
                continue
        else:
            where = directive_files.get(key)
        if where and os.path.dirname(where).endswith(".d") and os.path.basename(where) > fix.file:
            return f"{where} sorts after {fix.file} and sets {key}= too: it would still win; change it there"
    return None
