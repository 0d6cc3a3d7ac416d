"""What a unit's files say, read as systemd reads them: the fragment and its drop-ins in the order
systemd applies them (drop-ins in lexical order of their file names: the last one wins).

From the files: the effective ExecStart argv with the file each word came from (an `ExecStart=` in
a drop-in resets the list; `$VAR`/`${VAR}` are expanded from the unit's environment, so a flag that
arrives in `Environment=VLLM_ARGS=…` is credited to that file), the effective environment
(Environment= lines in order, then EnvironmentFile= files, which override them, read under
SPARKOPS_HOST_ROOT), and the file that set every other directive. The collectors read the files a
unit's `systemctl cat` prints (`collectors.unitconfig`); the simulator reads its own unit files
with the same rules."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from django.conf import settings

EDGES = ("After", "Wants", "Requires", "BindsTo")
LIST_DIRECTIVES = frozenset(
    {
        "ExecStart",
        "ExecStartPre",
        "ExecStartPost",
        "ExecStopPost",
        "Environment",
        "EnvironmentFile",
        "After",
        "Wants",
        "Requires",
        "BindsTo",
        "Before",
    }
)
# One directive of a unit file: (section, key, value, the line it starts on).
Directive = tuple[str, str, str, int]


class Command(TypedDict):
    """One Exec line: argv, the file each word came from, the file the line is in."""

    argv: list[str]
    origins: list[str]
    file: str


EXEC_PREFIX = re.compile(r"^[@\-:+!]+")
VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


class UnitFile:
    """One parsed unit file (the fragment or a drop-in): [(section, key, value, line)] in order."""

    def __init__(self, path: str, text: str) -> None:
        self.path, self.text = path, text
        self.directives = parse_unit_text(text)


def parse_unit_text(text: str) -> list[Directive]:
    """systemd.syntax(7): sections, Key=Value, # and ; comments, a trailing backslash continues."""
    out: list[Directive] = []
    section, pending, start = "", "", 0
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


def unit_words(value: str) -> list[str]:
    """Split a command line as systemd does (quotes and backslash escapes), keeping $VARs."""
    try:
        return shlex.split(value, posix=True)
    except ValueError:
        return value.split()


def env_assignments(value: str) -> list[tuple[str, str]]:
    """`Environment="A=1" B=2` → [("A", "1"), ("B", "2")]."""
    out: list[tuple[str, str]] = []
    for word in unit_words(value):
        key, sep, val = word.partition("=")
        if sep and key:
            out.append((key, val))
    return out


def read_env_file(path: str, root: str | None = None) -> list[tuple[str, str]] | None:
    """An EnvironmentFile=: KEY=VALUE lines, # and ; comments, quotes removed. None: unreadable.
    ROOT: where "/" is (SPARKOPS_HOST_ROOT by default)."""
    root = settings.SPARKOPS_HOST_ROOT if root is None else root
    full = os.path.join(root, path.lstrip("/")) if root not in ("", "/") else path
    try:
        with open(full, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 20)
    except OSError:
        return None
    return parse_env_text(text)


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_env_text(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pending = ""
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


def effective(files: Sequence[UnitFile], unit_name: str = "", root: str | None = None) -> dict[str, Any]:
    """The launch configuration from the unit's files, in application order.

    {"directives": {key: {"value", "file"}}, "exec_start": {"argv", "origins", "file"},
     "exec_start_post": [{"argv", "file"}], "exec_stop_post": [{"argv", "file"}], "environment": {NAME: value},
     "environment_origins": {NAME: file}, "environment_files": [{"path", "optional", "readable", "file"}],
     "edges": {"After": [unit...], ...}, "shadowed": [{"file", "argv"}]}"""
    scalars: dict[str, dict[str, str]] = {}
    lists: dict[str, list[tuple[str, str]]] = {k: [] for k in LIST_DIRECTIVES}
    for f in files:
        for _section, key, value, _line in f.directives:
            if key in LIST_DIRECTIVES:
                if value == "":
                    lists[key] = []  # an empty assignment resets the list
                else:
                    lists[key].append((value, f.path))
            else:
                scalars[key] = {"value": value, "file": f.path}
    env: dict[str, str] = {}
    env_origin: dict[str, str] = {}
    for value, path in lists["Environment"]:
        for key, val in env_assignments(value):
            env[key], env_origin[key] = val, path
    env_files: list[dict[str, Any]] = []
    for value, path in lists["EnvironmentFile"]:
        for word in unit_words(value):
            optional = word.startswith("-")
            name = word.lstrip("-")
            pairs = read_env_file(name, root)
            env_files.append({"path": name, "optional": optional, "readable": pairs is not None, "file": path})
            for key, val in pairs or ():
                env[key], env_origin[key] = val, name
    exec_start: Command | None = None
    shadowed: list[dict[str, Any]] = []
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
    stop_post = [_command(value, path, env, env_origin, unit_name) for value, path in lists["ExecStopPost"]]
    edges = {k: sorted({u for value, _ in lists[k] for u in value.split()}) for k in EDGES}
    edge_files = {k: sorted({p for _, p in lists[k]}) for k in EDGES}
    return {
        "directives": scalars,
        "exec_start": exec_start,
        "exec_start_post": post,
        "exec_stop_post": stop_post,
        "environment": env,
        "environment_origins": env_origin,
        "environment_files": env_files,
        "edges": edges,
        "edge_files": edge_files,
        "shadowed": shadowed or earlier,
    }


def _all_exec_starts(
    files: Sequence[UnitFile], env: Mapping[str, str], env_origin: Mapping[str, str], unit_name: str
) -> list[dict[str, Any]]:
    """Every file's own last ExecStart (to say which drop-in another one overrode)."""
    out: list[dict[str, Any]] = []
    for f in files:
        mine = [v for s, k, v, _ in f.directives if k == "ExecStart" and v]
        if mine:
            out.append({"file": f.path, "argv": _command(mine[-1], f.path, env, env_origin, unit_name)["argv"]})
    return out


def _command(value: str, path: str, env: Mapping[str, str], env_origin: Mapping[str, str], unit_name: str) -> Command:
    """One Exec line: argv with the file each word came from ($VARs credited to their setter)."""
    argv: list[str] = []
    origins: list[str] = []
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
