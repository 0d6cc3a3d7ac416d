"""`journalctl [-u UNIT]... [-k] [-o json|short|cat] [--after-cursor C] [-n N] [--no-pager]
[FIELD=VALUE]...` over the simulator's journal files. Matches as journalctl's: values of one field
ORed, fields ANDed, and with the units. Cursors are global across units like journald's:
`--after-cursor` returns only entries written after that one."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

from ..systemd import cursor_seq, read_entries
from . import state_path, unit_name

FIELD_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")  # journald's: upper-case letters, digits, underscores


def entries(args) -> list[dict]:
    jdir = state_path("journal")
    if args.dmesg:
        files = [(os.path.join(jdir, "kernel.jsonl"), False)]
    elif args.unit or args.user_unit:
        files = [(os.path.join(jdir, f"{unit_name(u)}.jsonl"), False) for u in args.unit]
        files += [(os.path.join(jdir, f"{unit_name(u)}.jsonl"), True) for u in args.user_unit]
    else:  # every unit's file, as glob("*.jsonl") lists them (no hidden ones)
        try:
            names = sorted(n for n in os.listdir(jdir) if n.endswith(".jsonl") and not n.startswith("."))
        except FileNotFoundError:
            names = []
        files = [(os.path.join(jdir, n), False) for n in names]
    out = [as_user_unit(e) if user else e for f, user in files for e in read_entries(f)]
    out.sort(key=lambda e: cursor_seq(e["__CURSOR"]))
    return out


def as_user_unit(e: dict) -> dict:
    """An entry of a unit read with --user-unit, as journald records a user manager's unit (systemd
    252): the unit's own lines carry `_SYSTEMD_USER_UNIT=<unit>` and `_SYSTEMD_UNIT=user@UID.service`
    (the service holding the user manager); the manager's messages about it `USER_UNIT=<unit>`
    (not UNIT=) and the manager's own `_SYSTEMD_USER_UNIT=init.scope`."""
    e = dict(e)
    manager = f"user@{e.get('_UID', 0)}.service"
    if "UNIT" in e:
        e["USER_UNIT"] = e.pop("UNIT")
        e.update(_SYSTEMD_UNIT=manager, _SYSTEMD_USER_UNIT="init.scope")
    elif "_SYSTEMD_UNIT" in e:
        e["_SYSTEMD_USER_UNIT"] = e["_SYSTEMD_UNIT"]
        e["_SYSTEMD_UNIT"] = manager
    return e


def short(e: dict) -> str:
    t = time.localtime(int(e["__REALTIME_TIMESTAMP"]) / 1e6)
    ident = e.get("SYSLOG_IDENTIFIER", "")
    pid = f"[{e['_PID']}]" if "_PID" in e else ""
    return f"{time.strftime('%b %d %H:%M:%S', t)} {e.get('_HOSTNAME', '')} {ident}{pid}: {e['MESSAGE']}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="journalctl")
    p.add_argument("-u", "--unit", action="append", default=[])
    p.add_argument("--user-unit", action="append", default=[])
    p.add_argument("-k", "--dmesg", action="store_true")
    p.add_argument("-o", "--output", default="short")
    p.add_argument("--after-cursor")
    p.add_argument("--cursor")
    p.add_argument("-n", "--lines", type=int)
    p.add_argument("-b", "--boot", nargs="?", const="0")
    p.add_argument("--since")
    p.add_argument("--show-cursor", action="store_true")
    p.add_argument("matches", nargs="*")
    for flag in ("--no-pager", "--user", "--system", "-q", "--quiet", "--all", "--utc", "--no-hostname"):
        p.add_argument(flag, action="store_true")
    args = p.parse_args(argv)
    if args.output not in ("json", "short", "cat"):
        print(f"sim-journalctl: unsupported output mode {args.output!r} (json, short, cat)", file=sys.stderr)
        return 1
    wanted: dict[str, set[str]] = {}
    for match in args.matches:
        field, eq, value = match.partition("=")
        if not eq or not FIELD_NAME.fullmatch(field):
            print(f"Failed to add match '{match}': Invalid argument", file=sys.stderr)
            return 1
        wanted.setdefault(field, set()).add(value)
    items = [e for e in entries(args) if all(str(e.get(f)) in values for f, values in wanted.items())]
    for flag, strict in ((args.after_cursor, True), (args.cursor, False)):
        if flag is not None:
            try:
                seq = cursor_seq(flag)
            except ValueError:
                print("Failed to seek to cursor: Invalid argument", file=sys.stderr)
                return 1
            items = [
                e for e in items if cursor_seq(e["__CURSOR"]) > seq or (not strict and cursor_seq(e["__CURSOR"]) == seq)
            ]
    if args.lines is not None:
        items = items[-args.lines :] if args.lines > 0 else []
    render = {
        "json": lambda e: json.dumps(e, ensure_ascii=False, separators=(",", ":")),
        "short": short,
        "cat": lambda e: e["MESSAGE"],
    }[args.output]
    out = [render(e) for e in items]
    if not items and args.output == "short" and not args.quiet:
        out.append("-- No entries --")
    if args.show_cursor and items:
        out.append(f"-- cursor: {items[-1]['__CURSOR']}")
    sys.stdout.write("".join(line + "\n" for line in out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
