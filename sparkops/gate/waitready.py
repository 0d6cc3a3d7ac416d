"""`sparkops wait-ready --url URL [--kind KIND] --budget SECONDS [--unit UNIT] [--user] [--port-owner any]`: the
readiness gate for a unit's `ExecStartPost=` (docs/field-notes.md §7: a readiness helper that exits 1).

Exit 0 when the engine serves from a listening socket the unit's own processes hold (its cgroup,
or $MAINPID's tree: another process answering on the port is not its engine serving, issue 47);
1 when its main process (`$MAINPID`, which systemd gives every ExecStartPost=) is gone, or when
the wall-clock budget runs out (systemd then fails the start: `Result=exit-code`, and a unit
ordered after it does not start into the overlap), naming who holds the port if another does; 2,
with one line, when the budget plus the gate's own start-up margin (START_MARGIN_S) is over the
unit's TimeoutStartSec (systemd would kill the gate first and the start would end as a timeout,
not as the gate's verdict), when the unit named does not exist, or the arguments are wrong.

The unit is the one whose cgroup this process (or $MAINPID) is in, as systemd placed it; `--unit`
names it instead. Every line goes to stdout, which is the unit's journal under systemd; the last
one is the outcome, which the box's worker reads back onto the start it belongs to (launch/gate_journal.py).

Run before Django is set up (`sparkops.cli`): a unit's environment has no SparkOps settings."""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import NoReturn
from urllib.parse import urlsplit

from sparkops.collectors import sockowner

from . import readiness
from .readiness import PREFIX


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Usage(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="sparkops wait-ready", description=__doc__.split("\n\n")[0], add_help=True)
    p.add_argument("--url", required=True, help="the engine's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--kind", choices=readiness.KINDS, help="its readiness: /health first, then /v1/models")
    p.add_argument("--budget", required=True, type=float, help="seconds of wall clock, below TimeoutStartSec")
    p.add_argument("--unit", help="the unit it gates (default: the one whose cgroup holds it)")
    p.add_argument("--user", action="store_true", help="--unit is a `systemctl --user` unit")
    p.add_argument(
        "--port-owner",
        choices=("unit", "any"),
        default="unit",
        help="unit (default): ready only when the URL's listening socket is the unit's own processes'; "
        "any: whoever serves it (an engine in a container whose port a proxy holds)",
    )
    return p


def say(line: str) -> None:
    print(line, flush=True)


START_MARGIN_S = 2.0  # the gate's own start-up under load (0.4-1.7 s measured, issue 47) before its clock runs


def main(argv: list[str]) -> int:
    try:
        args = parser().parse_args(argv)
        if not (math.isfinite(args.budget) and args.budget > 0):
            raise _Usage(f"--budget takes a positive number of seconds (got {args.budget:g})")
        port = _port_of(args.url)
        mainpid = _mainpid()
    except _Usage as exc:
        return refuse(str(exc))
    unit = (args.unit, "user" if args.user else _scope_of(args.unit, mainpid)) if args.unit else None
    unit = unit or readiness.own_unit(mainpid)
    where, facts = "", {}
    if unit is not None:
        try:
            facts = readiness.unit_facts(*unit)
        except RuntimeError as exc:
            if args.unit:  # named, so it matters: refuse rather than gate blind
                return refuse(f"TimeoutStartSec of {args.unit} not read: {exc}", prefix="refused: ")
            where = f", unit {unit[0]} (TimeoutStartSec not read: {exc})"
        if facts.get("load_state") == "not-found":
            manager = "user manager (systemctl --user)" if unit[1] == "user" else "system manager"
            return refuse(f"unit {unit[0]} does not exist in the {manager}: no unit file or drop-in names it")
        limit = facts.get("timeout_start_s")
        if limit is not None and args.budget + START_MARGIN_S > limit:
            return refuse(
                f"--budget {args.budget:g} s is not below TimeoutStartSec {limit:g} s of {unit[0]} less the gate's "
                f"own start-up margin of {START_MARGIN_S:g} s (at most {max(limit - START_MARGIN_S, 0):g} s): "
                "systemd would kill this gate first and call the start a timeout; lower --budget or raise "
                "TimeoutStartSec"
            )
        where = where or f", unit {unit[0]} (TimeoutStartSec {_span(limit)})"
    owners = None if args.port_owner == "any" else _owners(port, unit, mainpid, facts)
    from dashboard import http  # noqa: F401  imported before the first line: the budget's clock starts with it

    checked = (
        "port owner not checked (--port-owner any)"
        if args.port_owner == "any"
        else f"port {port} must be {owners.whose} own"
        if owners is not None
        else "port owner not checked: no unit and no $MAINPID"
    )
    say(
        f"{PREFIX} waiting for {args.url} ({args.kind or 'openai'}) to serve: budget {args.budget:g} s"
        f"{f', main pid {mainpid}' if mainpid else ', no $MAINPID'}{where}; {checked}"
    )
    return readiness.wait(args.url, args.kind, args.budget, pid=mainpid, owners=owners, say=say).code


def refuse(why: str, *, prefix: str = "") -> int:
    """One line on stderr (the unit's journal under systemd), exit 2."""
    text = prefix + why if prefix else readiness.REFUSED.format(why=why)
    print(f"{PREFIX} {text}", file=sys.stderr, flush=True)
    return 2


def _port_of(url: str) -> int:
    if not url.startswith(("http://", "https://")):
        raise _Usage(f"--url takes an http:// or https:// URL (got {url!r})")
    try:
        parts = urlsplit(url)
        return parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise _Usage(f"--url {url!r}: {exc}") from None


def _owners(port: int, unit: tuple[str, str] | None, mainpid: int | None, facts: dict) -> sockowner.Owners | None:
    """The processes whose socket on PORT counts as the engine's: the unit's cgroup (the gate's own
    when it runs in the unit, else as systemd shows it) and $MAINPID's tree."""
    cgroup = None
    if unit is not None:
        for pid in ("self", mainpid):
            if pid is None:
                continue
            found = readiness.unit_from_cgroup(_read(f"/proc/{pid}/cgroup"))
            if found and found[0] == unit[0]:
                cgroup = sockowner.cgroup_of(pid)
                break
        cgroup = cgroup or facts.get("cgroup")
    mainpid = mainpid or (facts.get("mainpid") if unit is not None else None)
    if cgroup is None and mainpid is None:
        return None
    whose = f"unit {unit[0]}'s" if unit is not None else f"main pid {mainpid}'s"
    return sockowner.Owners(port=port, mainpid=mainpid, cgroup=cgroup, whose=whose)


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


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
