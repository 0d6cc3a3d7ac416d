"""`systemctl show UNIT... [-p A,B]... [--value] [--all] [--user]`, `cat UNIT...`, `is-active`, `daemon-reload`, and
`start`/`stop`/`restart`/`reset-failed UNIT...` (through the supervisor's control API) over the
simulator's state dir. `--timestamp=pretty|us|utc|us+utc|unix` prints the *Timestamp properties in that
style (pretty, whole seconds, by default), as systemd 252 does. Output is systemctl's: KEY=VALUE per line, units separated by a
blank line, empty values suppressed unless requested with -p or --all, unknown units
shown as the LoadState=not-found stub. `--user` reads the same units. `cat` prints each unit's
fragment and drop-ins (from the simulator's root, `<state_dir>/root/`) after a `# PATH` line, units
separated by a blank line, and exits 1 naming a unit that has no files, as systemctl does. NeedDaemonReload=
is yes when a unit's files differ from what the supervisor last loaded (`cat` then warns, as systemctl
does); `daemon-reload` asks the supervisor (its control API) to load them."""

from __future__ import annotations

import argparse
import json
import os
import sys

from dashboard.systemctl_show import unit_props

from ..systemd import SHOW_KEYS, TIMESTAMP_STYLES, not_found_properties, restyle_timestamp
from ..units import fingerprint
from . import read_text, state_path, unit_name


def load(unit: str) -> dict:
    try:
        props = unit_props(read_text(state_path("units", f"{unit}.show")))
    except FileNotFoundError:
        return not_found_properties(unit)
    if "NeedDaemonReload" in props:
        props["NeedDaemonReload"] = "yes" if stale(unit) else "no"
    return props


def stale(unit: str) -> bool:

    try:
        loaded = read_text(state_path("units", f"{unit}.loaded"))
    except FileNotFoundError:
        return False
    return loaded != fingerprint(state_path("root"), unit)


def daemon_reload() -> int:
    import urllib.request

    try:
        control = read_text(state_path("control")).strip()
        req = urllib.request.Request(control + "/_sim/daemon-reload", data=b"{}", method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return 0 if resp.status == 200 else 1
    except (OSError, ValueError) as exc:
        print(f"Failed to reload daemon: {exc}", file=sys.stderr)
        return 1


def unit_action(verb: str, units: list[str]) -> int:
    """start/stop/restart/reset-failed through the supervisor's control API, failing as systemctl does."""
    import urllib.error
    import urllib.request

    try:
        control = read_text(state_path("control")).strip()
    except OSError as exc:
        print(f"Failed to connect to bus: {exc}", file=sys.stderr)
        return 1
    names = {f"{u['name']}.service": u["name"] for u in _units(control)}
    for unit in units:
        if unit not in names:
            if verb == "reset-failed":
                print(f"Failed to reset failed state of unit {unit}: Unit {unit} not loaded.", file=sys.stderr)
            else:
                print(f"Failed to {verb} {unit}: Unit {unit} not found.", file=sys.stderr)
            return 1 if verb == "reset-failed" else 5
        req = urllib.request.Request(f"{control}/_sim/units/{names[unit]}/{verb}", data=b"{}", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=60):
                pass
        except urllib.error.HTTPError as exc:
            try:
                why = json.loads(exc.read()).get("error", "")
            except ValueError:
                why = ""
            print(
                f"Job for {unit} failed because {why or 'the control process exited with error code'}.", file=sys.stderr
            )
            print(f'See "systemctl status {unit}" and "journalctl -xeu {unit}" for details.', file=sys.stderr)
            return 1
        except OSError as exc:
            print(f"Failed to {verb} {unit}: {exc}", file=sys.stderr)
            return 1
    return 0


def _units(control: str) -> list[dict]:
    import urllib.request

    with urllib.request.urlopen(control + "/_sim/units", timeout=10) as resp:
        return json.loads(resp.read())


def show_text(props: dict, wanted: list[str] | None, all_: bool, value_only: bool, timestamp: str = "pretty") -> str:
    order = list(SHOW_KEYS) + [k for k in props if k not in SHOW_KEYS]
    keys = [k for k in order if k in props and (wanted is None or k in wanted)]
    if wanted is None and not all_:
        keys = [k for k in keys if props[k] != ""]
    values = {k: restyle_timestamp(props[k], timestamp) if k.endswith("Timestamp") else props[k] for k in keys}
    return "".join((f"{values[k]}\n" if value_only else f"{k}={values[k]}\n") for k in keys)


def cat_text(unit: str) -> str | None:
    props = load(unit)
    paths = [p for p in [props.get("FragmentPath", ""), *props.get("DropInPaths", "").split()] if p]
    if props.get("LoadState") != "loaded" or not paths:
        return None
    root = state_path("root")
    parts = []
    if stale(unit):
        parts.append(
            f"# Warning: {unit} changed on disk, the version systemd has loaded is outdated.\n"
            "# This output shows the current version of the unit's original fragment and drop-in files.\n"
            "# If fragments or drop-ins were added or removed, they are not properly reflected in this output.\n"
            "# Run 'systemctl daemon-reload' to reload units.\n"
        )
    for path in paths:
        try:
            text = read_text(os.path.join(root, path.lstrip("/")))
        except OSError:
            continue
        parts.append(f"# {path}\n{text}" + ("" if text.endswith("\n") else "\n"))
    return "\n".join(parts)


def cat(units: list[str]) -> int:
    texts, rc = [], 0
    for unit in units:
        text = cat_text(unit)
        if text is None:
            print(f"No files found for {unit}.", file=sys.stderr)
            rc = 1
        else:
            texts.append(text)
    sys.stdout.write("\n".join(texts))
    return rc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="systemctl")
    p.add_argument(
        "verb",
        choices=["show", "cat", "is-active", "status", "daemon-reload", "start", "stop", "restart", "reset-failed"],
    )
    p.add_argument("units", nargs="*")
    p.add_argument("-p", "--property", action="append", default=[])
    p.add_argument("-P", dest="value_property", action="append", default=[])
    p.add_argument("--value", action="store_true")
    p.add_argument("-a", "--all", action="store_true")
    for flag in ("--user", "--system", "--no-pager", "--no-legend", "--quiet", "-q"):
        p.add_argument(flag, action="store_true")
    p.add_argument("--timestamp", default="pretty")
    args = p.parse_args(argv)
    if args.timestamp not in TIMESTAMP_STYLES:  # systemd 252's message and exit status
        print(f"Invalid value: {args.timestamp}.", file=sys.stderr)
        return 1
    units = [unit_name(u) for u in args.units]
    if args.verb == "is-active":
        states = [load(u)["ActiveState"] for u in units]
        if not args.quiet:
            print("\n".join(states))
        return 0 if states and all(s == "active" for s in states) else 3
    if args.verb == "cat":
        return cat(units)
    if args.verb == "daemon-reload":
        return daemon_reload()
    if args.verb in ("start", "stop", "restart", "reset-failed"):
        return unit_action(args.verb, units)
    if args.verb == "status":
        print("sim-systemctl supports 'show' and 'is-active' only", file=sys.stderr)
        return 1
    wanted = [w for spec in args.property + args.value_property for w in spec.split(",") if w] or None
    value_only = args.value or bool(args.value_property)
    texts = [show_text(load(u), wanted, args.all, value_only, args.timestamp) for u in units]
    sys.stdout.write("\n".join(texts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
