"""systemd: `systemctl show` for the engines' units (system and --user) and new journal
lines since a kept cursor, matched against fatal signatures and vLLM's KV boot lines.

One `systemctl show` per scope and one `journalctl` per scope per poll: spawning a
process is the dearest thing a collector does, so units are batched."""

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol

from django.conf import settings

from dashboard.systemctl_show import show_blocks
from sparkops.collectors.command import CommandError, output

# The stop hook's command line (sparkops/controls/stopped.py) as a unit carries it: `sparkops stopped …`
# (any path, `sparkops.cli` too) or `-m sparkops.controls.stopped` (what `sparkops unit fix` writes;
# `-m dashboard.controls.stopped` in drop-ins written before 2026-12-07, which still runs the hook).
# Read here in `systemctl show`'s ExecStopPost=, and by the audit's stop_hook check in the unit's files.
STOP_HOOK = re.compile(r"sparkops(?:\.cli)?\s+stopped(?:\s|$)|-m\s+(?:sparkops|dashboard)\.controls\.stopped(?:\s|$)")

PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "ExecMainStatus",
    "ExecMainCode",
    "MainPID",
    "ExecMainPID",
    "NRestarts",
    "Restart",
    "ActiveEnterTimestamp",
    # Before ExecMainExitTimestamp when a stop job ended the run, after it when the process exited
    # of its own accord (poller/exits.py tells a `systemctl stop` from an exit 0 by it).
    "ActiveExitTimestamp",
    "InactiveEnterTimestamp",
    "InactiveExitTimestamp",
    "ExecMainStartTimestamp",
    "ExecMainExitTimestamp",
    "ControlGroup",
    "MemoryCurrent",
    # Which run this is, and how long systemd gives a start: a death followed by a new
    # InvocationID with NRestarts unchanged was a restart someone asked for, not a crash.
    "InvocationID",
    "TimeoutStartUSec",
    "Type",
    # The job systemd runs on the unit now (its id; empty when none): a process that dies while a
    # stop or restart job runs was stopped on request.
    "Job",
)
# Read beside PROPERTIES and kept only as a flag (StopHook; the command line itself is not kept):
# whether the unit's stop runs SparkOps's stop hook, so the card can say the unit tells of a death.
STOP_POST = "ExecStopPost"
# Likewise ExecStartPost=, kept as StartPost: a unit with a readiness gate (or Type=notify) is
# active only once its process was declared ready, so "active but not answering" is then a lie.
START_POST = "ExecStartPost"
INT_PROPS = ("ExecMainStatus", "ExecMainCode", "MainPID", "ExecMainPID", "NRestarts")
CMD_TIMEOUT_S = 5
ANSI = re.compile(r"\x1b\[[0-9;]*m")
FATAL = (  # (name, pattern); docs/engines.md §7.4
    ("cuda_illegal_instruction", re.compile(r"illegal instruction", re.I)),
    ("cuda_illegal_memory_access", re.compile(r"illegal memory access", re.I)),
    ("xid", re.compile(r"NVRM: (?:GPU\d+ )?Xid \([^)]*\): (\d+)")),
    ("nv_err_no_memory", re.compile(r"NV_ERR_NO_MEMORY|\(0x00000051\)")),
    ("oom_kill", re.compile(r"Out of memory: Killed process|oom-kill:|invoked oom-killer")),
    (
        "engine_core_died",
        re.compile(
            r"EngineCore encountered a fatal error|engine core exited unexpectedly|"
            r"Worker proc \S+ died unexpectedly"
        ),
    ),
)
OOM_MESSAGE_ID = "fe6faa94e7774663a0da52717891d8ef"
KV_SIZE = re.compile(r"(?:[A-Z]+(?: \+ host)?) KV cache size: (?P<tokens>[\d,]+) tokens")
KV_CONC = re.compile(r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>[\d.]+)x")
# vLLM's worker, once per boot, before the pool line: `"Available KV cache memory: %.2f GiB"` (0.9 … 0.11,
# vllm/v1/worker/gpu_worker.py) or `"… %s GiB"` with format_gib (later; some builds append a
# parenthesis such as "(process-scoped)"). The KV memory the pool was sized from.
KV_MEMORY = re.compile(r"Available KV cache memory: (?P<gib>\d+(?:\.\d+)?) GiB")
GIB = 1024**3
# One `journalctl -o json` entry: field -> its text (a list of byte values for a non-UTF-8 one).
Entry = dict[str, Any]
# One unit's polled properties (`_typed`): None where empty, ints where numeric, StopHook and StartPost
# booleans, the unit's cgroup figures once the host reading adds them; or {"error": why}.
UnitProps = dict[str, Any]


class UnitEngine(Protocol):
    """What the unit readers read of an engine (dashboard.models.Engine has it): no model imported."""

    @property
    def pk(self) -> int: ...

    @property
    def unit(self) -> str: ...

    @property
    def unit_scope(self) -> str: ...


def _typed(props: Mapping[str, str]) -> UnitProps:
    """The polled properties of one unit: an empty value is None, the numeric ones ints."""
    out: dict[str, Any] = {k: props.get(k) or None for k in PROPERTIES}
    out["StopHook"] = bool(STOP_HOOK.search(props.get(STOP_POST) or ""))
    out["StartPost"] = bool((props.get(START_POST) or "").strip())
    for key in INT_PROPS:
        try:
            out[key] = int(out[key]) if out[key] is not None else None
        except ValueError:
            out[key] = None
    return out


# systemctl's default timestamps are whole seconds; --timestamp=us+utc (systemd 247 and later) keeps
# the microseconds systemd has, so a start measured from them is not rounded to a second.
TIMESTAMP_ARG = "--timestamp=us+utc"
_no_timestamp_arg: set[str] = set()  # systemctl programs that refused it (older than 247)


def show_output(argv: Sequence[str], *, timeout: float = CMD_TIMEOUT_S) -> str:
    """stdout of `systemctl … show …` (ARGV without the timestamp style) with timestamps in
    microseconds and UTC where this systemctl takes --timestamp=, in its default style where not."""
    if argv[0] not in _no_timestamp_arg:
        try:
            return output([*argv, TIMESTAMP_ARG], timeout=timeout)
        except CommandError as exc:
            words = str(exc)
            if "--timestamp" not in words and "unrecognized option" not in words:
                raise
            _no_timestamp_arg.add(argv[0])
    return output(argv, timeout=timeout)


def units_show(units: Sequence[str], *, scope: str = "system") -> dict[str, UnitProps]:
    """{unit: props or {"error": reason}} for the units of one scope, in one process."""
    if not units:
        return {}
    argv = [
        settings.SPARKOPS_SYSTEMCTL,
        *(["--user"] if scope == "user" else []),
        "show",
        *units,
        "-p",
        ",".join((*PROPERTIES, STOP_POST, START_POST)),
        "--no-pager",
    ]
    try:
        blocks = [_typed(b) for b in show_blocks(show_output(argv))]
    except CommandError as exc:
        return {u: {"error": str(exc)} for u in units}
    if len(blocks) != len(units):
        return {u: {"error": f"systemctl show gave {len(blocks)} blocks for {len(units)} units"} for u in units}
    return dict(zip(units, blocks))


def journal_read(
    *,
    units: Iterable[str] = (),
    user_units: Iterable[str] = (),
    kernel: bool = False,
    cursor: str | None = None,
    first_lines: int = 200,
) -> tuple[list[Entry], str | None]:
    """New journal entries since `cursor`: (entries, cursor). Either the units (system units
    with -u, --user units with --user-unit: both ORed by journalctl) or the kernel (-k),
    never both in one call — journalctl ANDs -k with unit matches."""
    if kernel:
        selection = ["-k"]
    else:
        selection = [*(f"--unit={u}" for u in units), *(f"--user-unit={u}" for u in user_units)]
        if not selection:
            return [], cursor
    argv = [
        settings.SPARKOPS_JOURNALCTL,
        "-o",
        "json",
        "--no-pager",
        *selection,
        *([f"--after-cursor={cursor}"] if cursor else ["-n", str(first_lines)]),
    ]
    entries = json_entries(output(argv, timeout=CMD_TIMEOUT_S))
    return entries, next((e["__CURSOR"] for e in reversed(entries) if e.get("__CURSOR")), cursor)


def unit_journal(unit: str, *, scope: str, first_lines: int = 200) -> list[Entry]:
    """The last FIRST_LINES journal entries of UNIT, a system or a --user unit by SCOPE."""
    units, user_units = ([], [unit]) if scope == "user" else ([unit], [])
    entries, _ = journal_read(units=units, user_units=user_units, first_lines=first_lines)
    return entries


def json_entries(text: str) -> list[Entry]:
    """The entries of `journalctl -o json` output; a torn line is skipped (the cursor of the next good
    one moves a reader on)."""
    entries: list[Entry] = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def start_post_pids(unit: str, *, scope: str = "system") -> list[int]:
    """The pids of UNIT's ExecStartPost= commands' last runs (systemd keeps each run's `pid=` in
    `systemctl show` until the next start, after a failed start too); [] where none ran."""
    argv = [
        settings.SPARKOPS_SYSTEMCTL,
        *(["--user"] if scope == "user" else []),
        "show",
        unit,
        "-p",
        "ExecStartPost",
        "--no-pager",
    ]
    return sorted({int(p) for p in re.findall(r"\bpid=(\d+)", output(argv, timeout=CMD_TIMEOUT_S)) if p != "0"})


def journal_pid_read(pids: Collection[int], *, first_lines: int = 200) -> list[Entry]:
    """The last FIRST_LINES journal entries written by any of PIDS (`_PID=` matches, ORed).

    journald names a line's unit from the writer's cgroup, read when the line arrives: a process that
    printed a line and exited before journald read it leaves the line with `_PID` but no unit field
    (systemd 252: 1 or 2 lines in 15 of an ExecStartPost= that echoes one line and exits), so a
    `--unit=` read misses it. A unit's own processes' pids find it."""
    if not pids:
        return []
    argv = [settings.SPARKOPS_JOURNALCTL, "-o", "json", "--no-pager", *(f"_PID={p}" for p in pids)]
    return json_entries(output([*argv, "-n", str(first_lines)], timeout=CMD_TIMEOUT_S))


def message(entry: Mapping[str, Any]) -> str:
    msg = entry.get("MESSAGE")
    if isinstance(msg, list):  # non-UTF-8 messages come as byte arrays
        msg = bytes(b for b in msg if isinstance(b, int) and 0 <= b < 256).decode("utf-8", "replace")
    return ANSI.sub("", msg) if isinstance(msg, str) else ""


def classify(entry: Mapping[str, Any]) -> tuple[str | None, dict[str, float]]:
    """(signature name or None, boot facts dict) for one journal entry."""
    text = message(entry)
    facts: dict[str, float] = {}  # pool_tokens, kv_memory_bytes, window: ints; concurrency: a float
    size = KV_SIZE.search(text)
    if size:
        facts["pool_tokens"] = int(size["tokens"].replace(",", ""))
    memory = KV_MEMORY.search(text)
    if memory:
        facts["kv_memory_bytes"] = round(float(memory["gib"]) * GIB)
    conc = KV_CONC.search(text)
    if conc:
        facts.update(window=int(conc["len"].replace(",", "")), concurrency=float(conc["x"]))
    if entry.get("MESSAGE_ID") == OOM_MESSAGE_ID:
        return "oom_kill", facts
    for name, pattern in FATAL:
        if pattern.search(text):
            return name, facts
    return None, facts


def entry_unit(entry: Mapping[str, Any]) -> str | None:
    """The unit an entry is about: the one a manager's own message names (UNIT=, or USER_UNIT= from
    a user manager), else the unit whose process wrote it. A --user unit's process lines carry
    both `_SYSTEMD_USER_UNIT=eng.service` and `_SYSTEMD_UNIT=user@UID.service` (the user manager's
    service that holds it), and a manager's message its own `_SYSTEMD_UNIT=init.scope` (or
    `_SYSTEMD_USER_UNIT=init.scope`): the user unit and the named unit come first (real systemd
    252; the simulator once wrote `_SYSTEMD_UNIT=` for user units too, so every user unit's line
    was credited to user@0.service)."""
    for key in ("UNIT", "USER_UNIT", "_SYSTEMD_USER_UNIT", "_SYSTEMD_UNIT"):
        if entry.get(key):
            return entry[key]
    return None


def fatal_line(entry: Mapping[str, Any], signature: str) -> dict[str, Any]:
    return {
        "time_us": entry.get("__REALTIME_TIMESTAMP"),
        "unit": entry_unit(entry),
        "kernel": entry.get("_TRANSPORT") == "kernel",
        "signature": signature,
        "message": message(entry)[:500],
    }
