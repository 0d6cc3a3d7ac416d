"""The units' own stop, told to the box's worker: the listening end of `sparkops stopped`
(sparkops/controls/stopped.py, each engine unit's `ExecStopPost=`).

`StopListener` binds an AF_UNIX datagram socket (`SPARKOPS_STOP_SOCKET`, mode 0600: only the
worker's user, or root, can write to it) and reads it on a thread of its own, in one `selectors`
loop with a wake-up pipe for `stop()`. Each datagram is one unit's stop: JSON with `unit`,
`service_result`, `exit_code`, `exit_status`, `main_pid` and `time`. A datagram longer than
MAX_DATAGRAM, not JSON, or without a unit name is logged and dropped; a handler that raises is
logged; nothing ends the loop but `stop()`.

`unit_at_stop` turns one stop into the `systemctl show` properties the engine_down rule classifies
(`alerts/rules/causes.classify`), from systemd's own verdict and the unit's Restart= as the last
host reading saw it, so the page goes out without asking systemd again (100–300 ms saved under a
busy manager). Why a datagram and not D-Bus: no maintained D-Bus library is among the project's
dependencies, a --user manager without a bus daemon speaks only its peer-to-peer private socket,
and the hook's one Python start costs less than a resident D-Bus client and its match rules."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)
MAX_DATAGRAM = 4096  # the hook's is ~200 bytes; anything longer is not the hook's
CODES = {"exited": 1, "killed": 2, "dumped": 3}  # CLD_*: as `systemctl show` gives ExecMainCode
# Which Restart= values bring the unit back after which Result= (systemd.service(5), "Restart=").
CLEAN = {"success"}
RESTARTS_ON = {
    "no": set(),
    "always": None,  # every result
    "on-success": CLEAN,
    "on-failure": {"exit-code", "signal", "core-dump", "timeout", "watchdog", "oom-kill", "protocol", "resources"},
    "on-abnormal": {"signal", "core-dump", "timeout", "watchdog"},
    "on-abort": {"signal", "core-dump"},
    "on-watchdog": {"watchdog"},
}


@dataclass
class Stop:
    """One unit's stop, as its ExecStopPost= hook saw it."""

    unit: str
    service_result: str  # systemd's Result=: success, exit-code, signal, core-dump, timeout, …
    exit_code: str  # exited, killed, dumped; "" when the main process never ran
    exit_status: str  # a number (exited) or a signal name (killed, dumped)
    main_pid: int | None
    time: float

    @classmethod
    def parse(cls, data: bytes) -> Stop:
        """The stop in DATA; ValueError when it is not one."""
        body = json.loads(data)
        if not isinstance(body, dict) or not isinstance(body.get("unit"), str) or not body["unit"]:
            raise ValueError("no unit name")
        text = {k: body.get(k) or "" for k in ("service_result", "exit_code", "exit_status")}
        if not all(isinstance(v, str) for v in text.values()):
            raise ValueError("a field is not text")
        pid, at = body.get("main_pid"), body.get("time")
        return cls(
            unit=body["unit"][:256],
            service_result=text["service_result"][:64],
            exit_code=text["exit_code"][:64],
            exit_status=text["exit_status"][:64],
            main_pid=pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None,
            time=float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else 0.0,
        )

    @property
    def status(self) -> int | None:
        """ExecMainStatus as `systemctl show` gives it: the exit status, or the signal's number."""
        if self.exit_status.isdigit():
            return int(self.exit_status)
        try:
            return int(signal.Signals["SIG" + self.exit_status.upper().removeprefix("SIG")])
        except KeyError:
            return None

    @property
    def by_hand(self) -> bool:
        """A SIGTERM stop with Result=success: what `systemctl stop` or `restart` leaves. Whether a start
        job follows cannot be told from here, so such a stop is left to the probe, which asks systemd."""
        return self.service_result == "success" and self.exit_code == "killed" and self.status == signal.SIGTERM

    def describe(self) -> str:
        how = f"{self.exit_code} {self.exit_status}".strip() or "no main process"
        return f"its unit stopped (Result={self.service_result or '?'}, {how})"


def restarts(restart: str, result: str) -> bool:
    """Whether systemd brings a unit with RESTART back after a run that ended with RESULT."""
    on = RESTARTS_ON.get(restart or "no", set())
    return on is None or result in on


def unit_at_stop(stop: Stop, last: dict | None) -> dict[str, Any]:
    """The unit's properties right after STOP, as `systemctl show` would say them once systemd has
    decided, from LAST (its properties as the last host reading saw them: Restart=, NRestarts)."""
    last = dict(last or {})
    result = stop.service_result or "success"
    status = stop.status
    if restarts(last.get("Restart") or "no", result):
        active, sub = "activating", "auto-restart"
    elif result == "success":
        active, sub = "inactive", "dead"
    else:
        active, sub = "failed", "failed"
    return {
        **last,
        "ActiveState": active,
        "SubState": sub,
        "Result": result,
        "ExecMainCode": CODES.get(stop.exit_code, 0),
        "ExecMainStatus": status,
        "MainPID": 0,
    }


def in_use(path: str) -> bool:
    """Whether a live socket is bound at PATH (another worker of this box listens there)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(path)
        except OSError:  # none there, or one left by a process that died (ECONNREFUSED)
            return False
    return True


class StopListener:
    """The worker's end of the stop hooks: `on_stop(Stop)` for each good datagram, on its own thread."""

    def __init__(self, path: str, on_stop: Callable[[Stop], None], *, name="sparkops-stops"):
        self.path = path
        self.on_stop = on_stop
        self.received = self.dropped = self.handled = 0  # good datagrams; bad ones; stops on_stop returned from
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        if in_use(path):
            raise OSError(f"another process listens on {path}")
        with contextlib.suppress(FileNotFoundError):  # a socket left by a worker that died
            os.unlink(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        old = os.umask(0o177)  # created 0600: no moment when another user could write to it
        try:
            self.sock.bind(path)
        finally:
            os.umask(old)
        self._inode = os.stat(path).st_ino
        self.sock.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        self.selector.register(self.sock, selectors.EVENT_READ, "stop")
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> StopListener:
        self.thread.start()
        return self

    def stop(self, timeout=5.0):
        self._stop.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b".")
        self.thread.join(timeout)
        self.selector.close()
        self.sock.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        with contextlib.suppress(OSError):
            if os.stat(self.path).st_ino == self._inode:  # not a later listener's
                os.unlink(self.path)

    def _run(self):
        while not self._stop.is_set():
            try:
                events = self.selector.select()
            except (OSError, ValueError):  # closed under us at stop()
                return
            for key, _ in events:
                if key.data == "stop":
                    self._drain()

    def _drain(self):
        while True:
            try:
                data = self.sock.recv(MAX_DATAGRAM + 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("stop listener: reading %s failed: %s", self.path, exc)
                return
            self.handle(data)

    def handle(self, data: bytes):
        """One datagram: parsed, checked, handed to on_stop; a bad one logged and dropped."""
        if len(data) > MAX_DATAGRAM:
            self.dropped += 1
            log.warning("stop listener: a datagram over %d bytes on %s dropped", MAX_DATAGRAM, self.path)
            return
        try:
            stop = Stop.parse(data)
        except (ValueError, TypeError, OverflowError, RecursionError) as exc:
            self.dropped += 1
            log.warning("stop listener: a datagram that is not a unit's stop dropped (%s): %r", exc, data[:120])
            return
        self.received += 1
        try:
            self.on_stop(stop)
        except Exception:
            log.exception("stop listener: handling the stop of %s failed; the probe will see it", stop.unit)
        finally:
            self.handled += 1
