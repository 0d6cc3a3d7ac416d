"""Engines outside any unit: `vllm serve`, `llama-server`, `sglang.launch_server` processes that no
watched unit owns (a smoke test from a fresh venv, a hand-started engine), read from
$SPARKOPS_PROC_ROOT/<pid>/{cmdline,environ,cgroup}. A hand-run engine inherits none of the
caps a unit sets: this is how the box once went unreachable for 19 minutes."""

from __future__ import annotations

import os

from django.conf import settings

from dashboard.collectors import flags as flagmodel

DEFAULT_PORT = {"vllm": 8000, "llamacpp": 8080, "sglang": 30000}


def _read(proc, pid, name, limit=1 << 20):
    try:
        with open(os.path.join(proc, pid, name), "rb") as fh:
            return fh.read(limit)
    except OSError:
        return None


def is_engine_launch(argv):
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


def cgroup_unit(raw):
    """The .service or .scope a /proc/PID/cgroup names (cgroup v2 line), or ''."""
    for line in (raw or b"").decode("utf-8", "replace").splitlines():
        if line.startswith("0::"):
            parts = [p for p in line[3:].split("/") if p.endswith((".service", ".scope"))]
            return parts[-1] if parts else ""
    return ""


def scan(*, watched_units=()):
    """[{pid, kind, argv, environ, cgroup, unit, host, port}] for engine servers no watched unit runs."""
    proc = settings.SPARKOPS_PROC_ROOT
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return []
    found = {}
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
        env = {}
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
    return [p for p in found.values() if str(p["ppid"]) not in found]


def _ppid(proc, pid):
    raw = (_read(proc, pid, "stat", 4096) or b"").decode("utf-8", "replace")
    fields = raw[raw.rfind(")") + 2 :].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return 0
