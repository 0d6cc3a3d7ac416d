"""How a unit launches its engine, as systemd sees it and as its files say it.

Two reads per scope, each one process for all the engines' units:

- `systemctl show UNIT... -p <CONFIG_PROPERTIES>`: the merged properties (docs/engines.md
  §7.1: `Name=value` lines, one blank-line-separated block per unit, time spans as `1min 30s`,
  `ExecStart={ path=… ; argv[]=… ; … }`, lists space-separated), and then the state of every unit
  those name in After=/Wants=/Requires=/BindsTo= (`UnitFileState`, `ActiveState`);
- `systemctl cat UNIT...`: the fragment and its drop-ins, each after a `# PATH` line, in the
  order systemd applies them, read by `collectors.unitfiles` into the effective ExecStart argv,
  environment and the file that set each directive.

`systemctl show`'s argv joins words with spaces (a JSON-valued flag would not survive it), so it is
only the fallback when the files cannot be read."""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from django.conf import settings

from dashboard.systemctl_show import show_blocks
from sparkops.collectors.command import CommandError, run
from sparkops.collectors.systemd import UnitEngine, show_output
from sparkops.collectors.unitfiles import EDGES, UnitFile, effective, env_assignments

CONFIG_PROPERTIES = (
    "Id",
    "LoadState",
    "FragmentPath",
    "DropInPaths",
    "UnitFileState",
    "Type",
    "ExecStart",
    "ExecStartPost",
    "ExecStopPost",
    "Environment",
    "EnvironmentFiles",
    "Restart",
    "RestartUSec",
    "StartLimitBurst",
    "StartLimitIntervalUSec",
    "TimeoutStartUSec",
    "After",
    "Wants",
    "Requires",
    "BindsTo",
    "MemoryHigh",
    "MemoryMax",
    "CPUQuotaPerSecUSec",
    "User",
    "ExecMainStartTimestamp",
    "ExecMainExitTimestamp",
    "InactiveExitTimestamp",
    "ActiveEnterTimestamp",
    "MainPID",
    "NeedDaemonReload",
)
DEP_PROPERTIES = ("Id", "LoadState", "UnitFileState", "ActiveState")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"  # systemd's PATH for system services
CMD_TIMEOUT_S = 5
FILE_TEXT_MAX = 64 * 1024  # a unit file longer than this is a mistake; its head is enough to read


# --- systemctl show / cat ---------------------------------------------------------------


def _systemctl(scope: str, *args: str) -> list[str]:
    return [settings.SPARKOPS_SYSTEMCTL, *(["--user"] if scope == "user" else []), *args, "--no-pager"]


def show(
    units: Sequence[str], *, scope: str = "system", properties: Sequence[str] = CONFIG_PROPERTIES
) -> dict[str, dict[str, str]]:
    """{unit: {property: raw value}} or raises CommandError. Units are matched by `Id`."""
    if not units:
        return {}
    text = show_output(_systemctl(scope, "show", *units, "-p", ",".join(properties)), timeout=CMD_TIMEOUT_S)
    blocks = show_blocks(text)
    by_id = {b.get("Id"): b for b in blocks if b.get("Id")}
    if len(blocks) == len(units):
        return {u: by_id.get(u, b) for u, b in zip(units, blocks)}
    return {u: by_id.get(u, {"LoadState": "not-found"}) for u in units}


def cat(units: Sequence[str], *, scope: str = "system") -> str:
    """`systemctl cat` of UNITS (one process); '' when none of them has files."""
    if not units:
        return ""
    try:  # exit 1 when one unit has no files: the others' text is still wanted
        return run(_systemctl(scope, "cat", *units), timeout=CMD_TIMEOUT_S).stdout or ""
    except CommandError:
        return ""


def split_cat(text: str, paths: Iterable[str]) -> dict[str, str]:
    """`systemctl cat` output → {path: text}. A file starts after a `# PATH` line naming one of
    PATHS (the FragmentPath and DropInPaths from `show`), so a comment inside a file that merely
    looks like a path is not taken for a header."""
    files: dict[str, list[str]] = {}
    current: str | None = None
    wanted = set(paths)
    for line in text.splitlines():
        if line.startswith("# ") and line[2:].strip() in wanted:
            current = line[2:].strip()
            files[current] = []
            continue
        if current is not None:
            files[current].append(line)
    return {path: "\n".join(lines).rstrip("\n") + "\n" for path, lines in files.items()}


def exec_struct(value: str | None) -> list[dict[str, Any]]:
    """`{ path=/x ; argv[]=/x a b ; ignore_errors=no ; … }` (one or several) → [{"path", "argv"}]."""
    out: list[dict[str, Any]] = []
    for block in re.findall(r"\{([^{}]*)\}", value or ""):
        fields: dict[str, str] = {}
        for part in block.split(" ; "):
            key, sep, val = part.strip().partition("=")
            if sep:
                fields[key] = val
        out.append({"path": fields.get("path", ""), "argv": fields.get("argv[]", "").split()})
    return out


def timespan_s(value: str | None) -> float | None:
    """systemd time span (`1min 30s`, `20min`, `100ms`, `1h`, `infinity`) → seconds (inf / None)."""
    if value is None or value == "":
        return None
    value = value.strip()
    if value == "infinity":
        return float("inf")
    units: dict[str, float] = {
        "us": 1e-6,
        "usec": 1e-6,
        "ms": 1e-3,
        "msec": 1e-3,
        "s": 1,
        "sec": 1,
        "second": 1,
        "seconds": 1,
        "min": 60,
        "m": 60,
        "minutes": 60,
        "h": 3600,
        "hr": 3600,
        "hour": 3600,
        "hours": 3600,
        "d": 86400,
        "day": 86400,
        "days": 86400,
        "w": 604800,
        "week": 604800,
        "month": 2629800,
        "y": 31557600,
    }
    total, found = 0.0, False
    for number, unit in re.findall(r"([\d.]+)\s*([a-z]*)", value):
        try:
            total += float(number) * units[unit or "s"]
            found = True
        except (KeyError, ValueError):
            return None
    return total if found else None


def memory_bytes(value: str | None) -> int | None:
    """MemoryMax/MemoryHigh from show: bytes, or None for `infinity`/unset."""
    if value in (None, "", "infinity", "[not set]"):
        return None
    try:
        return int(value)
    except ValueError:
        return None


def read_units(engines: Collection[UnitEngine]) -> dict[int, dict[str, Any]]:
    """{engine id: unit config dict} for ENGINES with a unit, reading each scope once."""
    out: dict[int, dict[str, Any]] = {}
    for scope in ("system", "user"):
        mine = [e for e in engines if e.unit and e.unit_scope == scope]
        names = sorted({e.unit for e in mine})
        if not names:
            continue
        try:
            props = show(names, scope=scope)
        except CommandError as exc:
            for e in mine:
                out[e.pk] = {"unit": e.unit, "scope": scope, "error": f"systemctl show: {exc}"}
            continue
        paths = {u: _paths(p) for u, p in props.items()}
        texts = split_cat(cat([u for u in names if paths[u]], scope=scope), [x for ps in paths.values() for x in ps])
        configs = {u: unit_config(u, scope, props[u], paths[u], texts) for u in names}
        deps = sorted({d for c in configs.values() for k in EDGES for d in c["edges"][k]})
        dep_states: dict[str, dict[str, str]] = {}
        if deps:
            try:
                dep_states = show(deps, scope=scope, properties=DEP_PROPERTIES)
            except CommandError as exc:
                dep_states = {d: {"error": str(exc)} for d in deps}
        for c in configs.values():
            c["edge_states"] = {
                d: {k: dep_states.get(d, {}).get(k, "") for k in ("LoadState", "UnitFileState", "ActiveState")}
                for k in EDGES
                for d in c["edges"][k]
            }
        for e in mine:
            out[e.pk] = configs[e.unit]
    return out


def _paths(props: Mapping[str, str]) -> list[str]:
    if props.get("LoadState") not in ("loaded", None):
        return []
    return [p for p in [props.get("FragmentPath", ""), *(props.get("DropInPaths") or "").split()] if p]


def unit_config(
    unit: str, scope: str, props: Mapping[str, str], paths: Sequence[str], texts: Mapping[str, str]
) -> dict[str, Any]:
    """One unit's launch configuration: the properties systemd reports and what its files say."""
    files = [UnitFile(p, texts[p]) for p in paths if p in texts]
    eff = effective(files, unit)
    exec_start: dict[str, Any] | None = eff["exec_start"]
    if exec_start is None:  # files unreadable: show's argv (words joined by spaces, so split again)
        shown = exec_struct(props.get("ExecStart"))
        if shown:
            exec_start = {
                "argv": shown[0]["argv"],
                "origins": [props.get("FragmentPath", "")] * len(shown[0]["argv"]),
                "file": props.get("FragmentPath", ""),
                "from": "systemctl show",
            }
    post = eff["exec_start_post"] or [
        {"argv": s["argv"], "origins": [], "file": ""} for s in exec_struct(props.get("ExecStartPost"))
    ]
    stop_post = eff["exec_stop_post"] or [
        {"argv": s["argv"], "origins": [], "file": ""} for s in exec_struct(props.get("ExecStopPost"))
    ]
    env = dict(eff["environment"])
    if not files and props.get("Environment"):
        env.update(env_assignments(props["Environment"]))
    edges = eff["edges"] if files else {k: sorted((props.get(k) or "").split()) for k in EDGES}
    config: dict[str, Any] = {
        "unit": unit,
        "scope": scope,
        "load_state": props.get("LoadState"),
        "unit_file_state": props.get("UnitFileState"),
        "fragment_path": props.get("FragmentPath", ""),
        "drop_in_paths": (props.get("DropInPaths") or "").split(),
        "files_read": [f.path for f in files],
        # Each file's text in the order systemd applies them, for the launch configuration page:
        # kept beside the snapshot (secrets redacted), not in what is hashed.
        "file_texts": [{"path": f.path, "text": f.text[:FILE_TEXT_MAX]} for f in files],
        "type": props.get("Type"),
        "exec_start": exec_start,
        "exec_start_post": post,
        "environment": env,
        "environment_origins": eff["environment_origins"],
        "environment_files": eff["environment_files"]
        or [
            {"path": w.split(" (")[0].lstrip("-"), "optional": "ignore_errors=yes" in w, "readable": None, "file": ""}
            for w in re.findall(r"\S+ \(ignore_errors=\w+\)", props.get("EnvironmentFiles") or "")
        ],
        "path_default": "PATH" not in env,
        "restart": props.get("Restart"),
        "restart_usec": props.get("RestartUSec"),
        "start_limit_burst": _int(props.get("StartLimitBurst")),
        "start_limit_interval_usec": props.get("StartLimitIntervalUSec"),
        "timeout_start_usec": props.get("TimeoutStartUSec"),
        "memory_high": props.get("MemoryHigh"),
        "memory_max": props.get("MemoryMax"),
        "cpu_quota_per_sec_usec": props.get("CPUQuotaPerSecUSec"),
        "user": props.get("User") or "",
        "edges": edges,
        "edge_files": eff["edge_files"],
        "directive_files": {k: v["file"] for k, v in eff["directives"].items()},
        "shadowed_exec_starts": eff["shadowed"],
        "started_at": props.get("ExecMainStartTimestamp") or "",
        # What runs: the main process's argv from /proc (None when no process runs, or it cannot be
        # read), and whether systemd holds an older version of the unit than its files
        # (edited without `systemctl daemon-reload`).
        "running_argv": running_argv(_int(props.get("MainPID"))),
        "need_daemon_reload": (props.get("NeedDaemonReload") or "") == "yes",
    }
    if stop_post:  # only where set: a snapshot of a unit without one hashes as it did before this was read
        config["exec_stop_post"] = stop_post
    pending = environment_not_running(_int(props.get("MainPID")), env)
    if pending:  # only where they differ: a unit whose process runs its environment hashes as before (issue 47)
        config["environment_not_running"] = pending
    return config


def running_argv(pid: int | None) -> list[str] | None:
    """The argv of process PID from $SPARKOPS_PROC_ROOT/PID/cmdline, or None."""
    if not pid:
        return None
    try:
        with open(os.path.join(settings.SPARKOPS_PROC_ROOT, str(pid), "cmdline"), "rb") as fh:
            raw = fh.read(1 << 20)
    except OSError:
        return None
    words = [w.decode("utf-8", "replace") for w in raw.rstrip(b"\0").split(b"\0")]
    return words if words and words[0] else None


_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.I)


def environment_not_running(pid: int | None, env: Mapping[str, str]) -> dict[str, str | None]:
    """{name: its value in what runs (None: unset)} for the variables the unit's files set (ENV) that
    the main process PID did not start with (/proc/PID/environ): a fix written into a running unit
    takes effect at its next restart, and until then the audit must not read it as in force. {}
    when they agree or the process cannot be read. Secret-looking values are not kept ("differs")."""
    if not pid or not env:
        return {}
    try:
        with open(os.path.join(settings.SPARKOPS_PROC_ROOT, str(pid), "environ"), "rb") as fh:
            raw = fh.read(1 << 20)
    except OSError:
        return {}
    running = dict(w.decode("utf-8", "replace").partition("=")[::2] for w in raw.split(b"\0") if b"=" in w)
    out: dict[str, str | None] = {}
    for name, value in env.items():
        if "%" in str(value) or running.get(name) == value:  # a specifier: systemd expands what the files say
            continue
        got = running.get(name)
        out[name] = "differs" if got is not None and _SECRET_NAME.search(name) else got
    return out


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
