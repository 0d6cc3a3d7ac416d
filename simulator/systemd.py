"""systemd and journald stand-ins: unit properties in `systemctl show` format and a
journal in `journalctl -o json` format, kept as files under the state directory:

    <state_dir>/units/<unit>.show       KEY=VALUE lines (what `systemctl show --all` prints)
    <state_dir>/journal/<unit>.jsonl    one journal entry (JSON object) per line
    <state_dir>/journal/kernel.jsonl    kernel messages (`journalctl -k`)
    <state_dir>/journal/seqnum          last sequence number (cursors are global)

Only the supervisor writes; readers (the bin/ tools) tolerate a half-written last line.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

# calendar, pathlib, socket and uuid are imported where used: the stand-ins (bin/) import this module
# on every call, thousands of times a test run, and use none of them (calendar, socket and uuid were
# 6 ms of a core a start; pathlib, with fnmatch and urllib.parse, most of another 8).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

SHOW_KEYS = (
    "Type",
    "Restart",
    "NotifyAccess",
    "RestartUSec",
    "TimeoutStartUSec",
    "TimeoutStopUSec",
    "MainPID",
    "ControlPID",
    "Result",
    "NRestarts",
    "ExecMainStartTimestamp",
    "ExecMainExitTimestamp",
    "ExecMainPID",
    "ExecMainCode",
    "ExecMainStatus",
    "ControlGroup",
    "MemoryCurrent",
    "Id",
    "Names",
    "Description",
    "LoadState",
    "ActiveState",
    "SubState",
    "FragmentPath",
    "UnitFileState",
    "NeedDaemonReload",
    "StateChangeTimestamp",
    "InactiveExitTimestamp",
    "ActiveEnterTimestamp",
    "ActiveExitTimestamp",
    "InactiveEnterTimestamp",
    "StartLimitIntervalUSec",
    "StartLimitBurst",
    "InvocationID",
    "DropInPaths",
    "ExecStart",
    "ExecStartPost",
    "ExecStopPost",
    "Environment",
    "EnvironmentFiles",
    "After",
    "Wants",
    "Requires",
    "BindsTo",
    "MemoryHigh",
    "MemoryMax",
    "CPUQuotaPerSecUSec",
    "User",
)
EXIT_STATUS_NAMES = {
    0: "SUCCESS",
    1: "FAILURE",
    2: "INVALIDARGUMENT",
    3: "NOTIMPLEMENTED",
    4: "NOPERMISSION",
    5: "NOTINSTALLED",
    6: "NOTCONFIGURED",
    7: "NOTRUNNING",
}
CLEAN_SIGNALS = {1, 2, 13, 15}  # SIGHUP, SIGINT, SIGPIPE, SIGTERM count as clean exits
MSG_PROCESS_EXIT = "98e322203f7a4ed290d09fe03c09fe15"
MSG_SUCCESS = "7ad2d189f7e94e70a38c781354912448"
MSG_FAILURE = "d9b373ed55a64feb8242e02dbe79a49c"
MSG_RESTART = "5eb03494b6584870a536b337290809b3"
MSG_STOPPING, MSG_STOPPED = "de5b426a63be47a7b6ac3eaac82e2f6f", "9d1aaa27d60140bd96365438aad20286"
MSG_STARTED = "39f53479d3a045ac8e11786248231fbf"
MSG_START_FAILED = "be02cf6855d2428ba40df7e9d022f03d"


TIMESTAMP_STYLES = ("pretty", "us", "utc", "us+utc", "unix")


def fmt_timestamp(t: float | None, style: str = "us+utc") -> str:
    """A timestamp as `systemctl show --timestamp=STYLE` prints it ('' if unset): pretty (systemd's
    default FORMAT_TIMESTAMP, whole seconds in local time: 'Tue 2026-07-14 10:02:11 UTC'), us
    (microseconds: '… 10:02:11.492971 UTC'), utc, us+utc, unix ('@1752487331'). The unit files keep
    us+utc, so `systemctl show` can print any style, as systemd keeps microseconds."""
    if not t:
        return ""
    if style == "unix":
        return f"@{int(t)}"
    utc = style in ("utc", "us+utc")
    parts = time.gmtime(t) if utc else time.localtime(t)
    day = time.strftime("%a %Y-%m-%d %H:%M:%S", parts)
    if style in ("us", "us+utc"):
        day += f".{round((t % 1) * 1e6) % 1_000_000:06d}"
    return f"{day} {'UTC' if utc else time.strftime('%Z', parts)}"


def timestamp_seconds(text: str) -> float | None:
    """The epoch seconds of a timestamp fmt_timestamp wrote in us+utc (or pretty/utc in UTC, or
    unix); None when it is empty or another format."""

    text = (text or "").strip()
    if text.startswith("@"):
        try:
            return float(text[1:])
        except ValueError:
            return None
    parts = text.split()
    if len(parts) != 4 or parts[3] != "UTC":
        return None
    day, _, frac = parts[2].partition(".")
    import calendar

    try:
        whole = calendar.timegm(time.strptime(f"{parts[1]} {day}", "%Y-%m-%d %H:%M:%S"))
    except ValueError:
        return None
    return whole + (int(frac) / 10 ** len(frac) if frac.isdigit() else 0.0)


def restyle_timestamp(text: str, style: str) -> str:
    """A stored timestamp as --timestamp=STYLE prints it (unchanged where it cannot be read)."""
    seconds = timestamp_seconds(text)
    return text if seconds is None else fmt_timestamp(seconds, style)


def fmt_timespan(seconds: float) -> str:
    if seconds == 0:
        return "0"
    ms = round(seconds * 1000)
    mins, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    parts = ([f"{mins}min"] if mins else []) + ([f"{secs}s"] if secs else []) + ([f"{ms}ms"] if ms else [])
    return " ".join(parts)


def signal_name(sig: int) -> str:

    try:
        return signal.Signals(sig).name[3:]
    except ValueError:
        return str(sig)


def not_found_properties(unit: str) -> dict:
    """The stub systemctl prints for a unit it does not know."""
    return {
        "Id": unit,
        "Names": unit,
        "LoadState": "not-found",
        "ActiveState": "inactive",
        "SubState": "dead",
        "Result": "success",
        "MainPID": "0",
        "ExecMainPID": "0",
        "ExecMainCode": "0",
        "ExecMainStatus": "0",
        "NRestarts": "0",
        "Restart": "no",
        "Type": "simple",
        "StartLimitBurst": "5",
        "StartLimitIntervalUSec": "10s",
        "UnitFileState": "",
        "LoadError": f'org.freedesktop.systemd1.NoSuchUnit "Unit {unit} not found."',
    }


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class Journal:
    """Appends journal entries with global sequence numbers and real-looking cursors."""

    def __init__(self, state_dir: Path) -> None:
        import socket
        import uuid
        from pathlib import Path

        self.dir = Path(state_dir) / "journal"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.seqnum_id = uuid.uuid4().hex
        self.boot_id = uuid.uuid4().hex
        self.machine_id = uuid.uuid4().hex
        self.hostname = socket.gethostname()
        seq_file = self.dir / "seqnum"
        self.seq = int(seq_file.read_text()) if seq_file.exists() else 0

    def append(self, file_stem: str, message: str, **fields: Any) -> dict:
        self.seq += 1
        now_us = int(time.time() * 1e6)
        mono_us = int(time.monotonic() * 1e6)
        import uuid

        cursor = (
            f"s={self.seqnum_id};i={self.seq:x};b={self.boot_id};m={mono_us:x};t={now_us:x};x={uuid.uuid4().hex[:16]}"
        )
        entry = {
            "__CURSOR": cursor,
            "__REALTIME_TIMESTAMP": str(now_us),
            "__MONOTONIC_TIMESTAMP": str(mono_us),
            "_BOOT_ID": self.boot_id,
            "_MACHINE_ID": self.machine_id,
            "_HOSTNAME": self.hostname,
            **{k: str(v) for k, v in fields.items()},
            "MESSAGE": message,
        }
        with open(self.dir / f"{file_stem}.jsonl", "a") as fh:
            fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
        write_atomic(self.dir / "seqnum", str(self.seq))
        return entry

    def process_line(self, unit: str, pid: int, ident: str, line: str) -> None:
        """A line the service wrote on stdout (journald stdout transport)."""
        self.append(
            unit,
            line,
            PRIORITY=6,
            SYSLOG_FACILITY=3,
            _TRANSPORT="stdout",
            SYSLOG_IDENTIFIER=ident,
            _PID=pid,
            _UID=os.getuid(),
            _GID=os.getgid(),
            _COMM=ident,
            _SYSTEMD_UNIT=unit,
            _SYSTEMD_CGROUP=f"/system.slice/{unit}",
            _SYSTEMD_SLICE="system.slice",
            _STREAM_ID=f"{pid:032x}",
        )

    def manager(self, unit: str, message: str, priority: int = 6, **extra: Any) -> None:
        """A message from the service manager about a unit (matched by `-u` via UNIT=)."""
        self.append(
            unit,
            message,
            PRIORITY=priority,
            SYSLOG_FACILITY=3,
            _TRANSPORT="journal",
            SYSLOG_IDENTIFIER="systemd",
            _PID=1,
            _UID=0,
            _GID=0,
            _COMM="systemd",
            CODE_FILE="src/core/unit.c",
            UNIT=unit,
            **extra,
        )

    def kernel(self, message: str, priority: int = 3) -> None:
        mono_us = int(time.monotonic() * 1e6)
        self.append(
            "kernel",
            message,
            PRIORITY=priority,
            SYSLOG_FACILITY=0,
            _TRANSPORT="kernel",
            SYSLOG_IDENTIFIER="kernel",
            _SOURCE_MONOTONIC_TIMESTAMP=mono_us,
        )


def read_entries(path: Path | str) -> list[dict]:
    out = []
    try:
        with open(path) as fh:
            for line in fh:
                if not line.endswith("\n"):
                    break  # still being written
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    except FileNotFoundError:
        pass
    return out


def cursor_seq(cursor: str) -> int:
    """The global sequence number inside a cursor; ValueError if it is not one of ours."""
    for part in cursor.split(";"):
        if part.startswith("i="):
            return int(part[2:], 16)
    raise ValueError(cursor)
