"""`sparkops stopped --socket PATH UNIT`: an engine unit's `ExecStopPost=` hook that tells the box's
worker the unit has stopped, and why, the moment systemd knows.

systemd gives every ExecStopPost= `$SERVICE_RESULT` (success, exit-code, signal, core-dump,
timeout, …), `$EXIT_CODE` (exited, killed, dumped) and `$EXIT_STATUS` (a number, or a signal
name such as KILL). This hands them over as ONE datagram (AF_UNIX, SOCK_DGRAM, JSON) to the
worker's socket (`SPARKOPS_STOP_SOCKET`, which `sparkops unit fix` writes into the command line);
the worker pages from these facts without asking `systemctl show` again
(`sparkops/poller/stopsocket.py`).

It must never fail or hold up the unit's stop: the send is non-blocking, every error (no worker,
no socket, a full queue) is swallowed, and it always exits 0. Run before Django is set up
(`sparkops.cli`), with the standard library only: a Python start is its whole cost. The command
line a unit runs it by is recognised by `sparkops.collectors.systemd.STOP_HOOK`."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Mapping

MAX_DATAGRAM = 4096  # the worker reads at most this much of one datagram; a longer one is dropped there


def message(unit: str, env: Mapping[str, str] | None = None) -> bytes:
    """The datagram for UNIT from systemd's environment ENV (default os.environ)."""
    env = os.environ if env is None else env
    main_pid = env.get("MAINPID") or ""
    body = {
        "unit": unit,
        "service_result": env.get("SERVICE_RESULT", ""),
        "exit_code": env.get("EXIT_CODE", ""),
        "exit_status": env.get("EXIT_STATUS", ""),
        "main_pid": int(main_pid) if main_pid.isdigit() else None,
        "time": time.time(),
    }
    return json.dumps(body, separators=(",", ":")).encode()[:MAX_DATAGRAM]


def send(path: str, data: bytes) -> bool:
    """Send DATA to the socket at PATH without waiting; whether it went."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.sendto(data, path)
    except OSError:  # no worker, no socket, its queue full: the pidfd and the probe still see the death
        return False
    return True


def parse(argv: list[str]) -> tuple[str, str]:
    """(socket path, unit) from `--socket PATH UNIT` (or `--socket=PATH`); the path defaults to
    $SPARKOPS_STOP_SOCKET, the unit to the last word."""
    path, unit = os.environ.get("SPARKOPS_STOP_SOCKET", ""), ""
    words = iter(argv)
    for word in words:
        if word == "--socket":
            path = next(words, path)
        elif word.startswith("--socket="):
            path = word.partition("=")[2]
        elif not word.startswith("-"):
            unit = word
    return path, unit


def main(argv: list[str]) -> int:
    try:
        path, unit = parse(argv)
        if path and unit:
            send(path, message(unit))
    except Exception:  # never fail the unit's stop, whatever happens
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
