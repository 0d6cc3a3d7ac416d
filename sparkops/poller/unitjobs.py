"""The jobs systemd runs on the box's units, as the manager announces them: a stop or restart
someone asked for is told from an exit of the engine's own at the moment of the exit.

The manager emits `JobNew` when a job is queued and `JobRemoved` when it ends (D-Bus signals of
org.freedesktop.systemd1.Manager, sent to every client that called `Subscribe()`). A stop job is
queued before the SIGTERM that ends the process, so by the time a pidfd says the process exited,
the signal has been sent; a round trip to the manager (`sync`: a method call whose reply comes
after every signal sent before it, D-Bus keeping one connection's messages in order) makes sure
it has been read too. The journal says the same, but later: a follower (`journalctl -f`) sees new
lines a quarter second after they are written (journald batches its change notifications), and a
user manager logs a clean exit at debug level, i.e. not at all; a unit left inactive is unloaded
at once and `systemctl show` then reads a blank unit. Nothing else tells in time.

Where it connects: the manager's private socket when this process may open it (the --user
manager's `$XDG_RUNTIME_DIR/systemd/private`; the system manager's `/run/systemd/private`, root's
only), a peer-to-peer connection with no bus; else the session or system bus, with a match rule
for the two signals. jeepney (pure-Python D-Bus, no C library) does the wire protocol: its
blocking `DBusConnection` says `Hello` to a bus on connecting, which a peer connection refuses, so
this module authenticates with jeepney's `prep_socket` and reads with its `Parser` itself.

`JobWatch.job_at(unit, t)` answers: the stop-like job (stop, restart, try-restart, …) that ran on
UNIT at wall time T, or None when none did, or raises `Unknown` when the watch is not connected
(the caller then asks the journal, as before)."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass

from jeepney import DBusAddress, HeaderFields, MessageType, new_method_call
from jeepney.bus_messages import MatchRule, message_bus
from jeepney.io.blocking import prep_socket
from jeepney.low_level import Message, Parser

log = logging.getLogger(__name__)
MANAGER_IFACE = "org.freedesktop.systemd1.Manager"
MANAGER = DBusAddress("/org/freedesktop/systemd1", bus_name="org.freedesktop.systemd1", interface=MANAGER_IFACE)
PEER = DBusAddress(
    "/org/freedesktop/systemd1", bus_name="org.freedesktop.systemd1", interface="org.freedesktop.DBus.Peer"
)
# Job types that end the running process (a "restart" job turns into a start once its stop is done).
STOPPING = {"stop", "restart", "try-restart", "reload-or-restart", "try-reload-or-restart"}
KEPT_S = 600.0  # ended jobs are forgotten after this
# A job that ended this long before the exit was seen still counts: the exit path starts a few
# ms after the exit (more at load), and a fast stop job may be removed by then.
ENDED_SLACK_S = 1.0
SYNC_TIMEOUT_S = 0.5
RECONNECT_S, RECONNECT_MAX_S = 5.0, 300.0  # connecting again after a failure: doubling up to the max
NUDGE_S, NUDGES = 0.1, 20  # while connecting: a Ping to wake the manager after this long without a reply


class Unknown(Exception):
    """The watch cannot say (not connected, or the manager did not answer in time)."""


@dataclass
class UnitJob:
    id: int
    unit: str
    queued_at: float  # wall seconds, when JobNew was read
    type: str = ""  # JobType, asked of the manager once queued ("" while unknown or when gone first)
    ended_at: float | None = None
    result: str = ""  # JobRemoved's: done, canceled, timeout, failed, …


def private_socket(scope: str) -> str | None:
    """The manager's private socket for SCOPE ("user", "system") when this process may use it."""
    if scope == "user":
        runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
        path = os.path.join(runtime, "systemd", "private")
    else:
        path = "/run/systemd/private"
    return path if os.path.exists(path) and os.access(path, os.R_OK | os.W_OK) else None


def bus_address(scope: str) -> str | None:
    if scope == "user":
        return os.environ.get("DBUS_SESSION_BUS_ADDRESS") or None
    path = "/run/dbus/system_bus_socket"
    return path if os.path.exists(path) else None


class JobWatch:
    """One connection to SCOPE's manager, its job signals read on a thread of its own."""

    def __init__(self, scope: str, *, name: str = "sparkops-unitjobs"):
        self.scope = scope
        self.jobs: dict[int, UnitJob] = {}
        self.connected = False
        self.where = ""
        self._sock: socket.socket | None = None
        self._serial = 0
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._replies: dict[int, Message | None] = {}  # serial -> the reply, once read (sync waits on it)
        self._type_of: dict[int, int] = {}  # serial of a JobType query -> job id
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> JobWatch:
        self.thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(timeout)

    # -- what the exit path asks

    def job_at(self, unit: str, at: float) -> UnitJob | None:
        """The stop-like job that ran on UNIT at wall time AT (queued before it, not removed more
        than ENDED_SLACK_S before it; a start job, such as systemd's own restart after Restart=,
        ends no process), or None; `Unknown` when this watch cannot say."""
        self.sync()
        name = unit if "." in unit else f"{unit}.service"
        with self._cond:
            found = [
                j
                for j in self.jobs.values()
                if j.unit == name
                and j.queued_at <= at + ENDED_SLACK_S
                and (j.ended_at is None or j.ended_at >= at - ENDED_SLACK_S)
                # A job whose type was not read (over before it could be asked) counts only if it was
                # queued before the exit: systemd's own restart (a start job, in 252) comes after it.
                and (j.type in STOPPING or (not j.type and j.queued_at <= at and (j.ended_at or at) >= at))
            ]
        return max(found, key=lambda j: j.queued_at) if found else None

    def sync(self, timeout: float = SYNC_TIMEOUT_S) -> None:
        """Return once every signal the manager sent before now has been read (a Ping's reply
        comes after them); `Unknown` when not connected or no answer in TIMEOUT."""
        if not self.connected:
            raise Unknown(f"not connected to the {self.scope} manager")
        ping = new_method_call(PEER, "Ping")
        serial = self._send(ping, want_reply=True)
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._replies.get(serial) is None:
                left = deadline - time.monotonic()
                if left <= 0 or not self.connected:
                    self._replies.pop(serial, None)
                    raise Unknown(f"the {self.scope} manager did not answer in {timeout:g} s")
                self._cond.wait(left)
            self._replies.pop(serial, None)

    # -- the connection

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._connect()
                failures = 0
                self._read()
            except (OSError, ValueError, TimeoutError) as exc:
                failures += 1
                if not self._stop.is_set():
                    # Said once; a box without the manager (a container) would say it every few seconds.
                    level = logging.INFO if failures == 1 else logging.DEBUG
                    log.log(level, "unit jobs (%s): %s; the exit path asks the journal meanwhile", self.scope, exc)
            finally:
                self._drop()
            self._stop.wait(min(RECONNECT_MAX_S, RECONNECT_S * 2 ** max(0, failures - 1)))

    def _connect(self) -> None:
        private = private_socket(self.scope)
        address = private or bus_address(self.scope)
        if address is None:
            raise OSError(f"no {self.scope} manager socket or bus here")
        path = address.split("unix:path=", 1)[1].split(",", 1)[0] if address.startswith("unix:") else address
        self._sock = prep_socket(path)
        self._parser = Parser()
        if private is None:  # a bus: say Hello, and ask for the manager's two signals
            self._call(new_method_call(message_bus, "Hello"))
            for member in ("JobNew", "JobRemoved"):
                rule = MatchRule(type="signal", interface=MANAGER_IFACE, member=member, path=MANAGER.object_path)
                self._call(new_method_call(message_bus, "AddMatch", "s", (rule.serialise(),)))
        self._call(new_method_call(MANAGER, "Subscribe"))
        self.where = path
        with self._cond:
            self.connected = True
        log.info("unit jobs (%s): watching the manager's jobs through %s", self.scope, path)

    def _drop(self) -> None:
        with self._cond:
            self.connected = False
            self._cond.notify_all()
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _send(self, message: Message, *, want_reply: bool = False) -> int:
        sock = self._sock
        if sock is None:
            raise Unknown("not connected")
        with self._send_lock:
            self._serial += 1
            serial = self._serial
            if want_reply:
                with self._cond:
                    self._replies[serial] = None
            sock.sendall(message.serialise(serial=serial))
        return serial

    def _call(self, message: Message) -> Message:
        """A method call made while connecting (before the reader runs): its reply, read here.

        The manager's end reads what follows the authentication's BEGIN with it, and then waits
        for the socket to turn readable again before it handles that first call (seen on systemd
        252: the reply never came until more was sent). So while no reply comes, a Ping is sent
        every NUDGE_S to wake it, NUDGES times at most."""
        assert self._sock is not None
        serial = self._send(message)
        self._sock.settimeout(NUDGE_S)
        try:
            for _ in range(NUDGES):
                try:
                    while True:
                        reply = self._next()
                        if reply.header.fields.get(HeaderFields.reply_serial) == serial:
                            if reply.header.message_type == MessageType.error:
                                raise OSError(f"{message.header.fields.get(HeaderFields.member)}: {reply.body}")
                            return reply
                except TimeoutError:
                    self._send(new_method_call(PEER, "Ping"))
            raise TimeoutError(f"no answer to {message.header.fields.get(HeaderFields.member)} from the manager")
        finally:
            self._sock.settimeout(None)

    def _next(self) -> Message:
        assert self._sock is not None
        while True:
            message = self._parser.get_next_message()
            if message is not None:
                return message
            data = self._sock.recv(65536)
            if not data:
                raise OSError("the manager closed the connection")
            self._parser.add_data(data)

    def _read(self) -> None:
        while not self._stop.is_set():
            message = self._next()
            kind = message.header.message_type
            fields = message.header.fields
            if kind == MessageType.signal and fields.get(HeaderFields.interface) == MANAGER_IFACE:
                self._signal(fields.get(HeaderFields.member), message.body)
            elif kind in (MessageType.method_return, MessageType.error):
                self._reply(fields.get(HeaderFields.reply_serial), message)

    def _signal(self, member, body) -> None:
        now = time.time()
        if member == "JobNew":
            job_id, path, unit = body
            with self._cond:
                self.jobs[job_id] = UnitJob(job_id, unit, now)
                self._forget(now)
            query = new_method_call(
                DBusAddress(path, bus_name=MANAGER.bus_name, interface="org.freedesktop.DBus.Properties"),
                "Get",
                "ss",
                ("org.freedesktop.systemd1.Job", "JobType"),
            )
            serial = self._send(query)
            with self._cond:
                self._type_of[serial] = job_id
        elif member == "JobRemoved":
            job_id, _path, unit, result = body
            with self._cond:
                job = self.jobs.setdefault(job_id, UnitJob(job_id, unit, now))
                job.ended_at, job.result = now, result

    def _reply(self, serial, message: Message) -> None:
        with self._cond:
            job_id = self._type_of.pop(serial, None)
            if job_id is not None:
                job = self.jobs.get(job_id)
                if job is not None and message.header.message_type == MessageType.method_return:
                    job.type = str(message.body[0][1])  # a variant: (signature, value)
            elif serial in self._replies:
                self._replies[serial] = message
                self._cond.notify_all()

    def _forget(self, now: float) -> None:
        for job_id in [i for i, j in self.jobs.items() if j.ended_at is not None and now - j.ended_at > KEPT_S]:
            del self.jobs[job_id]
