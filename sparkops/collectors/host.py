"""Host memory (psutil), PSI (/proc/pressure/*) and per-unit cgroup v2 files.

Absent sources are states, not errors: a container or old kernel without PSI reads
`psi: null` with the reason kept, and the rest of the host reading goes on."""

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypedDict

import psutil
from django.conf import settings

PSI_RESOURCES = ("cpu", "memory", "io")
# One PSI file: {"some" | "full": {"avg10": %, "avg60": %, "avg300": %, "total": µs}}.
Psi = dict[str, dict[str, float]]


class Memory(TypedDict):
    mem_total_bytes: int
    mem_available_bytes: int
    mem_used_bytes: int
    swap_total_bytes: int
    swap_used_bytes: int


class CgroupMemory(TypedDict):
    memory_current_bytes: int
    memory_max_bytes: int | None  # None: no limit ("max"), or unreadable
    oom_kill: int | None


_PROCFS_LOCK = threading.Lock()


@contextmanager
def _procfs(root: str) -> Iterator[None]:
    """psutil reads one global PROCFS_PATH: point it at ROOT (the simulator's fake /proc in the
    demo and tests) only for this read, so process scans elsewhere still see the real /proc."""
    if root == psutil.PROCFS_PATH:
        yield
        return
    with _PROCFS_LOCK:
        saved, psutil.PROCFS_PATH = psutil.PROCFS_PATH, root
        try:
            yield
        finally:
            psutil.PROCFS_PATH = saved


def read_memory() -> Memory:
    with _procfs(settings.SPARKOPS_PROC_ROOT):
        vm, sw = psutil.virtual_memory(), psutil.swap_memory()
    return {
        "mem_total_bytes": vm.total,
        "mem_available_bytes": vm.available,
        "mem_used_bytes": vm.total - vm.available,
        "swap_total_bytes": sw.total,
        "swap_used_bytes": sw.used,
    }


def parse_psi(text: str) -> Psi:
    """`some avg10=.. avg60=.. avg300=.. total=..` lines → {"some": {...}, "full": {...}} (docs/engines.md §6.1)."""
    out: Psi = {}
    for line in text.splitlines():
        kind, *pairs = line.split()
        if kind not in ("some", "full"):
            raise ValueError(f"unexpected PSI line {line[:60]!r}")
        values: dict[str, float] = {}
        for pair in pairs:
            key, value = pair.split("=", 1)
            values[key] = int(value) if key == "total" else float(value)
        out[kind] = values
    if not out:
        raise ValueError("empty PSI file")
    return out


def read_psi() -> tuple[dict[str, Psi] | None, str]:
    """({resource: parsed} or None, reason). PSI missing entirely → (None, reason)."""
    root = os.path.join(settings.SPARKOPS_PROC_ROOT, "pressure")
    result: dict[str, Psi] = {}
    reasons: list[str] = []
    for res in PSI_RESOURCES:
        try:
            with open(os.path.join(root, res)) as fh:
                result[res] = parse_psi(fh.read())
        except FileNotFoundError:
            reasons.append(f"{res}: absent (kernel without CONFIG_PSI or a container)")
        except OSError as exc:  # EOPNOTSUPP when booted with psi=0
            reasons.append(f"{res}: {exc.strerror or exc}")
        except ValueError as exc:
            reasons.append(f"{res}: unreadable ({exc})")
    return (result or None), "; ".join(reasons)


def psi_stall_rates(
    psi: Mapping[str, Psi] | None, before: Mapping[str, Any], now: float
) -> tuple[dict[str, float], dict[str, Any]]:
    """Stall share (%) over the last poll from the cumulative `total` µs counters."""
    rates: dict[str, float] = {}
    totals: dict[str, float | None] = {}
    for res, kinds in (psi or {}).items():
        for kind, values in kinds.items():
            key = f"{res}.{kind}"
            totals[key] = values.get("total")
            prev = (before.get("totals") or {}).get(key)
            dt = now - before.get("t", now)
            if prev is not None and totals[key] is not None and dt > 0 and totals[key] >= prev:
                rates[f"psi.{key}.stall_pct"] = (totals[key] - prev) / (dt * 1e6) * 100
    return rates, {"t": now, "totals": totals}


def read_cgroup(control_group: str | None) -> CgroupMemory | None:
    """memory.current / memory.max / oom_kill of a unit's cgroup v2 directory, or None."""
    if not control_group:
        return None
    base = os.path.join(settings.SPARKOPS_CGROUP_ROOT, control_group.lstrip("/"))
    try:
        current = int(_read(base, "memory.current"))
    except (OSError, ValueError):
        return None  # unit stopped (ENOENT), cgroup v1, or accounting off
    out: CgroupMemory = {"memory_current_bytes": current, "memory_max_bytes": None, "oom_kill": None}
    try:
        limit = _read(base, "memory.max").strip()
        out["memory_max_bytes"] = None if limit == "max" else int(limit)
        events = dict(line.split() for line in _read(base, "memory.events").splitlines() if line.strip())
        out["oom_kill"] = int(events.get("oom_kill", 0))
    except (OSError, ValueError):
        pass
    return out


def _read(base: str, name: str) -> str:
    with open(os.path.join(base, name)) as fh:
        return fh.read()
