"""`sparkops wait-ready --url URL [--kind KIND] --budget SECONDS [--unit UNIT] [--user]`: the
readiness gate for a unit's `ExecStartPost=` (docs/field-notes.md §7: a readiness helper that exits 1).

Exit 0 when the engine serves; 1 when its main process (`$MAINPID`, which systemd gives every
ExecStartPost=) is gone, or when the wall-clock budget runs out (systemd then fails the start:
`Result=exit-code`, and a unit ordered after it does not start into the overlap); 2, with one line,
when the budget is not below the unit's TimeoutStartSec (systemd would kill the gate first and the
start would end as a timeout, not as the gate's verdict) or the arguments are wrong.

The unit is the one whose cgroup this process (or $MAINPID) is in, as systemd placed it; `--unit`
names it instead. Every line goes to stdout, which is the unit's journal under systemd; the last
one is the outcome, which the box's worker reads back onto the start it belongs to (gates.py).

Run before Django is set up (`sparkops.cli`): a unit's environment has no SparkOps settings."""

from __future__ import annotations

import argparse
import math
import os
import sys

from . import readiness
from .readiness import PREFIX


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _Usage(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="sparkops wait-ready", description=__doc__.split("\n\n")[0], add_help=True)
    p.add_argument("--url", required=True, help="the engine's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--kind", choices=readiness.KINDS, help="its readiness: /health first, then /v1/models")
    p.add_argument("--budget", required=True, type=float, help="seconds of wall clock, below TimeoutStartSec")
    p.add_argument("--unit", help="the unit it gates (default: the one whose cgroup holds it)")
    p.add_argument("--user", action="store_true", help="--unit is a `systemctl --user` unit")
    return p


def say(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str]) -> int:
    try:
        args = parser().parse_args(argv)
        if not (math.isfinite(args.budget) and args.budget > 0):
            raise _Usage(f"--budget takes a positive number of seconds (got {args.budget:g})")
        if not args.url.startswith(("http://", "https://")):
            raise _Usage(f"--url takes an http:// or https:// URL (got {args.url!r})")
        mainpid = _mainpid()
    except _Usage as exc:
        print(f"{PREFIX} {readiness.REFUSED.format(why=str(exc))}", file=sys.stderr, flush=True)
        return 2
    unit = (args.unit, "user" if args.user else _scope_of(args.unit, mainpid)) if args.unit else None
    unit = unit or readiness.own_unit(mainpid)
    where = ""
    if unit is not None:
        try:
            limit = readiness.timeout_start_s(*unit)
        except RuntimeError as exc:
            if args.unit:  # named, so it matters: refuse rather than gate blind
                print(f"{PREFIX} refused: TimeoutStartSec of {args.unit} not read: {exc}", file=sys.stderr, flush=True)
                return 2
            limit, where = None, f", unit {unit[0]} (TimeoutStartSec not read: {exc})"
        if limit is not None and args.budget >= limit:
            why = (
                f"--budget {args.budget:g} s is not below TimeoutStartSec {limit:g} s of {unit[0]}: systemd would "
                "kill this gate first and call the start a timeout; lower --budget or raise TimeoutStartSec"
            )
            print(f"{PREFIX} {readiness.REFUSED.format(why=why)}", file=sys.stderr, flush=True)
            return 2
        where = where or f", unit {unit[0]} (TimeoutStartSec {_span(limit)})"
    from dashboard import http  # noqa: F401  imported before the first line: the budget's clock starts with it

    say(
        f"{PREFIX} waiting for {args.url} ({args.kind or 'openai'}) to serve: budget {args.budget:g} s"
        f"{f', main pid {mainpid}' if mainpid else ', no $MAINPID'}{where}"
    )
    return readiness.wait(args.url, args.kind, args.budget, pid=mainpid, say=say).code


def _mainpid() -> int | None:
    raw = os.environ.get("MAINPID", "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) <= 0:
        raise _Usage(f"$MAINPID is not a process id (got {raw!r})")
    return int(raw)


def _scope_of(unit: str, mainpid: int | None) -> str:
    found = readiness.own_unit(mainpid)
    return found[1] if found and found[0] == unit else "system"


def _span(seconds: float | None) -> str:
    return "not set" if seconds is None else "infinity" if seconds == float("inf") else f"{seconds:g} s"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
