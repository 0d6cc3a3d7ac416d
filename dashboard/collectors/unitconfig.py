"""How a unit launches its engine, as systemd sees it and as its files say it.

Two reads per scope, each one process for all the engines' units:

- `systemctl show UNIT... -p <CONFIG_PROPERTIES>`: the merged properties (docs/engines.md
  §7.1: `Name=value` lines, one blank-line-separated block per unit, time spans as `1min 30s`,
  `ExecStart={ path=… ; argv[]=… ; … }`, lists space-separated), and then the state of every unit
  those name in After=/Wants=/Requires=/BindsTo= (`UnitFileState`, `ActiveState`);
- `systemctl cat UNIT...`: the fragment and its drop-ins, each after a `# PATH` line, in the
  order systemd applies them (drop-ins in lexical order of their file names: the last one wins).

From the files: the effective ExecStart argv with the file each word came from (an
`ExecStart=` in a drop-in resets the list; `$VAR`/`${VAR}` are expanded from the unit's
environment, so a flag that arrives in `Environment=VLLM_ARGS=…` is credited to that file), the
effective environment (Environment= lines in order, then EnvironmentFile= files, which override
them, read under SPARKOPS_HOST_ROOT), and the file that set every other directive. `systemctl
show`'s argv joins words with spaces (a JSON-valued flag would not survive it), so it is only the
fallback when the files cannot be read."""

from __future__ import annotations

import os
import re
import shlex

from django.conf import settings

from dashboard.collectors.command import CommandError, run
from dashboard.collectors.systemd import show_output

CONFIG_PROPERTIES = (
    "Id",
    "LoadState",
    "FragmentPath",
    "DropInPaths",
    "UnitFileState",
    "Type",
    "ExecStart",
    "ExecStartPost",
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
EDGES = ("After", "Wants", "Requires", "BindsTo")
LIST_DIRECTIVES = frozenset(
    {
        "ExecStart",
        "ExecStartPre",
        "ExecStartPost",
        "Environment",
        "EnvironmentFile",
        "After",
        "Wants",
        "Requires",
        "BindsTo",
        "Before",
    }
)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"  # systemd's PATH for system services
CMD_TIMEOUT_S = 5
FILE_TEXT_MAX = 64 * 1024  # a unit file longer than this is a mistake; its head is enough to read
EXEC_PREFIX = re.compile(r"^[@\-:+!]+")
VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


class UnitFile:
    """One parsed unit file (the fragment or a drop-in): [(section, key, value, line)] in order."""

    def __init__(self, path, text):
        self.path, self.text = path, text
        self.directives = parse_unit_text(text)


def parse_unit_text(text):
    """systemd.syntax(7): sections, Key=Value, # and ; comments, a trailing backslash continues."""
    out, section, pending, start = [], "", "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending:
            start = number
            if not line or line[0] in "#;":
                continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        if sep:
            out.append((section, key.strip(), value.strip(), start))
    return out


def split_cat(text, paths):
    """`systemctl cat` output → {path: text}. A file starts after a `# PATH` line naming one of
    PATHS (the FragmentPath and DropInPaths from `show`), so a comment inside a file that merely
    looks like a path is not taken for a header."""
    files, current, wanted = {}, None, set(paths)
    for line in text.splitlines():
        if line.startswith("# ") and line[2:].strip() in wanted:
            current = line[2:].strip()
            files[current] = []
            continue
        if current is not None:
            files[current].append(line)
    return {path: "\n".join(lines).rstrip("\n") + "\n" for path, lines in files.items()}


def unit_words(value):
    """Split a command line as systemd does (quotes and backslash escapes), keeping $VARs."""
    try:
        return shlex.split(value, posix=True)
    except ValueError:
        return value.split()


def env_assignments(value):
    """`Environment="A=1" B=2` → [("A", "1"), ("B", "2")]."""
    out = []
    for word in unit_words(value):
        key, sep, val = word.partition("=")
        if sep and key:
            out.append((key, val))
    return out


def read_env_file(path, root=None):
    """An EnvironmentFile=: KEY=VALUE lines, # and ; comments, quotes removed. None: unreadable.
    ROOT: where "/" is (SPARKOPS_HOST_ROOT by default)."""
    root = settings.SPARKOPS_HOST_ROOT if root is None else root
    full = os.path.join(root, path.lstrip("/")) if root not in ("", "/") else path
    try:
        with open(full, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 20)
    except OSError:
        return None
    out = []
    for line in parse_env_text(text):
        out.append(line)
    return out


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_env_text(text):
    out, pending = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line[0] in "#;"):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        line, pending = pending + line, ""
        key, sep, value = line.partition("=")
        if not sep or not ENV_NAME.fullmatch(key.strip()):
            continue  # systemd 252: "Ignoring invalid environment assignment 'export A=1'" (no shell `export`)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out.append((key.strip(), value))
    return out


def effective(files, unit_name="", root=None):
    """The launch configuration from the unit's files, in application order.

    {"directives": {key: {"value", "file"}}, "exec_start": {"argv", "origins", "file"},
     "exec_start_post": [{"argv", "file"}], "environment": {NAME: value},
     "environment_origins": {NAME: file}, "environment_files": [{"path", "optional", "readable", "file"}],
     "edges": {"After": [unit...], ...}, "shadowed": [{"file", "argv"}]}"""
    scalars, lists = {}, {k: [] for k in LIST_DIRECTIVES}
    for f in files:
        for _section, key, value, _line in f.directives:
            if key in LIST_DIRECTIVES:
                if value == "":
                    lists[key] = []  # an empty assignment resets the list
                else:
                    lists[key].append((value, f.path))
            else:
                scalars[key] = {"value": value, "file": f.path}
    env, env_origin = {}, {}
    for value, path in lists["Environment"]:
        for key, val in env_assignments(value):
            env[key], env_origin[key] = val, path
    env_files = []
    for value, path in lists["EnvironmentFile"]:
        for word in unit_words(value):
            optional = word.startswith("-")
            name = word.lstrip("-")
            pairs = read_env_file(name, root)
            env_files.append({"path": name, "optional": optional, "readable": pairs is not None, "file": path})
            for key, val in pairs or ():
                env[key], env_origin[key] = val, name
    exec_start, shadowed = None, []
    for value, path in lists["ExecStart"]:
        if exec_start is not None:
            shadowed.append({"file": exec_start["file"], "argv": exec_start["argv"]})
        exec_start = _command(value, path, env, env_origin, unit_name)
    earlier = [
        s
        for s in _all_exec_starts(files, env, env_origin, unit_name)
        if exec_start is None or s["file"] != exec_start["file"]
    ]
    post = [_command(value, path, env, env_origin, unit_name) for value, path in lists["ExecStartPost"]]
    edges = {k: sorted({u for value, _ in lists[k] for u in value.split()}) for k in EDGES}
    edge_files = {k: sorted({p for _, p in lists[k]}) for k in EDGES}
    return {
        "directives": scalars,
        "exec_start": exec_start,
        "exec_start_post": post,
        "environment": env,
        "environment_origins": env_origin,
        "environment_files": env_files,
        "edges": edges,
        "edge_files": edge_files,
        "shadowed": shadowed or earlier,
    }


def _all_exec_starts(files, env, env_origin, unit_name):
    """Every file's own last ExecStart (to say which drop-in another one overrode)."""
    out = []
    for f in files:
        mine = [v for s, k, v, _ in f.directives if k == "ExecStart" and v]
        if mine:
            out.append({"file": f.path, "argv": _command(mine[-1], f.path, env, env_origin, unit_name)["argv"]})
    return out


def _command(value, path, env, env_origin, unit_name):
    """One Exec line: argv with the file each word came from ($VARs credited to their setter)."""
    argv, origins = [], []
    words = unit_words(value.replace("%n", unit_name).replace("%N", unit_name.rsplit(".", 1)[0]).replace("%%", "%"))
    if words:
        words[0] = EXEC_PREFIX.sub("", words[0])
    for word in words:
        whole = VAR.fullmatch(word)
        if whole and whole.group(2):  # $VAR alone: its value split at whitespace
            name = whole.group(2)
            for part in env.get(name, "").split():
                argv.append(part)
                origins.append(env_origin.get(name, path))
            continue
        used = [m.group(1) or m.group(2) for m in VAR.finditer(word)]
        argv.append(VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), word))
        origins.append(next((env_origin[n] for n in used if n in env_origin), path))
    return {"argv": argv, "origins": origins, "file": path}


# --- systemctl show / cat ---------------------------------------------------------------


def _systemctl(scope, *args):
    return [settings.SPARKOPS_SYSTEMCTL, *(["--user"] if scope == "user" else []), *args, "--no-pager"]


def parse_show_blocks(text):
    blocks, current = [], {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
            current = {}
            continue
        key, sep, value = line.partition("=")
        if sep:
            current[key] = value
    if current:
        blocks.append(current)
    return blocks


def show(units, *, scope="system", properties=CONFIG_PROPERTIES):
    """{unit: {property: raw value}} or raises CommandError. Units are matched by `Id`."""
    if not units:
        return {}
    text = show_output(_systemctl(scope, "show", *units, "-p", ",".join(properties)), timeout=CMD_TIMEOUT_S)
    blocks = parse_show_blocks(text)
    by_id = {b.get("Id"): b for b in blocks if b.get("Id")}
    if len(blocks) == len(units):
        return {u: by_id.get(u, b) for u, b in zip(units, blocks)}
    return {u: by_id.get(u, {"LoadState": "not-found"}) for u in units}


def cat(units, *, scope="system"):
    """`systemctl cat` of UNITS (one process); '' when none of them has files."""
    if not units:
        return ""
    try:  # exit 1 when one unit has no files: the others' text is still wanted
        return run(_systemctl(scope, "cat", *units), timeout=CMD_TIMEOUT_S).stdout or ""
    except CommandError:
        return ""


def exec_struct(value):
    """`{ path=/x ; argv[]=/x a b ; ignore_errors=no ; … }` (one or several) → [{"path", "argv"}]."""
    out = []
    for block in re.findall(r"\{([^{}]*)\}", value or ""):
        fields = {}
        for part in block.split(" ; "):
            key, sep, val = part.strip().partition("=")
            if sep:
                fields[key] = val
        out.append({"path": fields.get("path", ""), "argv": fields.get("argv[]", "").split()})
    return out


def timespan_s(value):
    """systemd time span (`1min 30s`, `20min`, `100ms`, `1h`, `infinity`) → seconds (inf / None)."""
    if value is None or value == "":
        return None
    value = value.strip()
    if value == "infinity":
        return float("inf")
    units = {
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


def memory_bytes(value):
    """MemoryMax/MemoryHigh from show: bytes, or None for `infinity`/unset."""
    if value in (None, "", "infinity", "[not set]"):
        return None
    try:
        return int(value)
    except ValueError:
        return None


def read_units(engines):
    """{engine id: unit config dict} for ENGINES with a unit, reading each scope once."""
    out = {}
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
        dep_states = {}
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


def _paths(props):
    if props.get("LoadState") not in ("loaded", None):
        return []
    return [p for p in [props.get("FragmentPath", "")] + (props.get("DropInPaths") or "").split() if p]


def unit_config(unit, scope, props, paths, texts):
    """One unit's launch configuration: the properties systemd reports and what its files say."""
    files = [UnitFile(p, texts[p]) for p in paths if p in texts]
    eff = effective(files, unit)
    exec_start = eff["exec_start"]
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
    env = dict(eff["environment"])
    if not files and props.get("Environment"):
        env.update(env_assignments(props["Environment"]))
    edges = eff["edges"] if files else {k: sorted((props.get(k) or "").split()) for k in EDGES}
    return {
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


def running_argv(pid):
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


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
