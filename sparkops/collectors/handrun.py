"""Engines outside any unit: `vllm serve`, `llama-server`, `sglang.launch_server` processes that no
watched unit owns (a smoke test from a fresh venv, a hand-started engine), read from
$SPARKOPS_PROC_ROOT/<pid>/{cmdline,environ,cgroup}. A hand-run engine inherits none of the
caps a unit sets: this is how the box once went unreachable for 19 minutes."""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from typing import TypedDict

from django.conf import settings

from sparkops.collectors import flags as flagmodel
from sparkops.collectors.sockowner import port_owner_pids, tree_pids

DEFAULT_PORT = {"vllm": 8000, "llamacpp": 8080, "sglang": 30000}


class HandRun(TypedDict):
    """An engine server no watched unit runs, as `scan` finds it."""

    pid: int
    kind: str
    argv: list[str]
    environ: dict[str, str]
    cgroup: str
    unit: str
    host: str
    port: int
    ppid: int


def _read(proc: str, pid: str, name: str, limit: int = 1 << 20) -> bytes | None:
    try:
        with open(os.path.join(proc, pid, name), "rb") as fh:
            return fh.read(limit)
    except OSError:
        return None


def is_engine_launch(argv: Sequence[str]) -> str | None:
    """The engine kind when ARGV starts an engine's server, else None (its workers, tools)."""
    kind = flagmodel.detect_kind(argv)
    head = [os.path.basename(w) for w in argv[:4]]
    if kind == "vllm" and ("serve" in argv[:3] or any("vllm.entrypoints" in w for w in argv[:4])):
        return kind
    if kind == "llamacpp" and head and head[0].startswith("llama-server"):
        return kind
    if kind == "sglang" and (any("sglang.launch_server" in w for w in argv[:4]) or "serve" in argv[:3]):
        return kind
    return None


def cgroup_unit(raw: bytes | None) -> str:
    """The .service or .scope a /proc/PID/cgroup names (cgroup v2 line), or ''."""
    for line in (raw or b"").decode("utf-8", "replace").splitlines():
        if line.startswith("0::"):
            parts = [p for p in line[3:].split("/") if p.endswith((".service", ".scope"))]
            return parts[-1] if parts else ""
    return ""


def scan(*, watched_units: Collection[str] = ()) -> list[HandRun]:
    """[{pid, kind, argv, environ, cgroup, unit, host, port}] for engine servers no watched unit runs."""
    proc = settings.SPARKOPS_PROC_ROOT
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return []
    found: dict[str, HandRun] = {}
    for pid in pids:
        raw = _read(proc, pid, "cmdline")
        if not raw:
            continue
        argv = [w.decode("utf-8", "replace") for w in raw.rstrip(b"\0").split(b"\0")]
        kind = is_engine_launch(argv)
        if kind is None:
            continue
        cgroup = (_read(proc, pid, "cgroup") or b"").decode("utf-8", "replace").strip()
        unit = cgroup_unit(cgroup.encode())
        if unit and unit in watched_units:
            continue
        env: dict[str, str] = {}
        for item in (_read(proc, pid, "environ") or b"").split(b"\0"):
            key, sep, value = item.decode("utf-8", "replace").partition("=")
            if sep and key:
                env[key] = value
        parsed = flagmodel.parse_argv(kind, argv, env=env)
        host = str(parsed.flags.get("--host") or "127.0.0.1")
        try:
            port = int(parsed.flags.get("--port") or DEFAULT_PORT[kind])
        except ValueError:
            continue
        found[pid] = {
            "pid": int(pid),
            "kind": kind,
            "argv": argv,
            "environ": env,
            "cgroup": cgroup,
            "unit": unit,
            "host": "127.0.0.1" if host in ("0.0.0.0", "::", "") else host,
            "port": port,
            "ppid": _ppid(proc, pid),
        }
    # a server's own children (API server workers, EngineCore) share its command line: keep the parent
    servers = [p for p in found.values() if str(p["ppid"]) not in found]
    return [p for p in servers if _may_serve(p, proc)]


def _may_serve(found: HandRun, proc: str) -> bool:
    """False when another process (not FOUND's own tree) holds the listening socket of FOUND's port:
    then the answers at its address are that process's, not this engine's (issue 47: an engine
    loading onto a port a hand-run one serves, to die on "address already in use"). Only on the
    box's own /proc (sockowner reads the kernel's tables, not a simulated root)."""
    if os.path.realpath(proc) != "/proc":
        return True
    owners = port_owner_pids(found["port"])
    return not owners or bool(owners & tree_pids(found["pid"]))


def _ppid(proc: str, pid: str) -> int:
    raw = (_read(proc, pid, "stat", 4096) or b"").decode("utf-8", "replace")
    fields = raw[raw.rfind(")") + 2 :].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return 0
