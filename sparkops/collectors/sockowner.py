"""Whose is a listening port? The socket's inode, read from the kernel's own tables, found among
a process's open files (issue 47 item 1: a gate that called a unit ready while a hand-run engine
served its port, and the unit's own engine then exited on "address already in use").

An HTTP answer on a port says that *something* serves there, not that the unit's engine does; the
kernel knows which: its table of TCP sockets (sock_diag over netlink, or `/proc/net/tcp{,6}`) gives
each listening socket with its inode, and `/proc/PID/fd/N` of the process holding it reads
`socket:[INODE]`. So:

- `listening_inodes(port)`: the inodes of the sockets listening on PORT (any address, v4 or v6);
- `pids_holding(inodes, pids)`: which of PIDS hold one of them (only their fds are read);
- `port_owner_pids(port)`: every process of the box holding PORT's listening socket (the whole
  /proc walked: for a message or for an engine without a unit, not for a poll loop);
- `unit_pids(cgroup)` and `tree_pids(pid)`: a unit's processes (its cgroup, subgroups included)
  and a process with its descendants — what "the unit's own processes" are;
- `Owners`: the check the readiness gate runs per probe, costing only the reads of the own pids'
  fds after one pass over the tables (bench/wait_ready.py prints its CPU with 1,000 sockets open).

The tables are per network namespace: read from the namespace the engine serves in (the gate runs
in its unit, `sparkops launch` beside its engine). A process of another user whose fds this one
may not read counts as not own (its owner is named "unreadable"). Importable without Django."""

from __future__ import annotations

import os
import re
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
LISTEN = "0A"
CGROUP_MOUNTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")  # v2 alone, or v2 beside v1 (hybrid)


def _line_re(port: int) -> re.Pattern[str]:
    # "  12: 0100007F:2275 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000  0 4242 …"
    return re.compile(
        rf"^\s*\d+: [0-9A-F]+:{port:04X} [0-9A-F]+:[0-9A-F]+ {LISTEN} \S+ \S+ \S+ +\d+ +\d+ (\d+)", re.MULTILINE
    )


def listening_inodes(port: int, *, netlink: bool = True) -> set[int]:
    """The inodes of the sockets in LISTEN on PORT, IPv4 and IPv6, any local address: from the
    kernel's sock_diag (netlink), else (or with NETLINK false) from /proc/net/tcp{,6}."""
    if not netlink:
        return _proc_listening(port)
    try:
        return _diag_listening(port)
    except OSError:
        return _proc_listening(port)


def _proc_listening(port: int, *, tables: tuple[str, ...] = TABLES) -> set[int]:
    """The same from /proc/net/tcp{,6}: every TCP socket of the namespace printed and parsed, about
    10 ms of kernel time alone with 1,300-2,800 sockets open (11-15 ms a check in all on the dev VM,
    bench/wait_ready.py; sock_diag 0.13 ms), hence the netlink first."""
    pattern, found = _line_re(port), set[int]()
    for table in tables:
        try:
            with open(table) as fh:
                text = fh.read()
        except OSError:
            continue
        found.update(int(m) for m in pattern.findall(text) if m != "0")
    return found


# sock_diag (linux/inet_diag.h): a dump of the TCP sockets in LISTEN only, the kernel filtering by
# state, so the cost does not grow with the box's connections (0.03 ms with 2,000 sockets open).
# Hand-written (30 lines of struct) rather than pyroute2: one request, one reply shape, no dependency.
NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY = 4, 20
NLM_F_REQUEST, NLM_F_DUMP, NLMSG_ERROR, NLMSG_DONE = 0x1, 0x300, 2, 3
TCP_LISTEN = 10
_NLMSG = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_REQ = struct.Struct("=BBBBI48x")  # inet_diag_req_v2: family, protocol, ext, pad, states, sockid (any)
_SPORT = struct.Struct("!H")  # inet_diag_msg: family, state, timer, retrans, then sockid.sport (big endian)
_INODE = struct.Struct("=I")  # inet_diag_msg.idiag_inode, at 4 + 48 + 16


def _diag_listening(port: int) -> set[int]:
    found: set[int] = set()
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as nl:
        for seq, family in enumerate((socket.AF_INET, socket.AF_INET6), start=1):
            req = _REQ.pack(family, socket.IPPROTO_TCP, 0, 0, 1 << TCP_LISTEN)
            nl.send(_NLMSG.pack(_NLMSG.size + len(req), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + req)
            found |= _diag_replies(nl, port)
    return found


def _diag_replies(nl: socket.socket, port: int) -> set[int]:
    found: set[int] = set()
    while True:
        data, off = nl.recv(1 << 16), 0
        while off + _NLMSG.size <= len(data):
            length, kind, _flags, _seq, _pid = _NLMSG.unpack_from(data, off)
            if kind == NLMSG_DONE:
                return found
            if kind == NLMSG_ERROR or length < _NLMSG.size:
                raise OSError("sock_diag answered an error")
            body = off + _NLMSG.size
            if _SPORT.unpack_from(data, body + 4)[0] == port:
                found.add(_INODE.unpack_from(data, body + 68)[0])
            off += (length + 3) & ~3
        if not data:
            raise OSError("sock_diag closed before its end")


def _holds(pid: int, targets: set[str]) -> bool | None:
    """Whether PID has one of TARGETS ('socket:[INODE]') open; None when its fds are not readable."""
    fd_dir = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except PermissionError:
        return None
    except OSError:
        return False
    for name in names:
        try:
            if os.readlink(f"{fd_dir}/{name}") in targets:
                return True
        except OSError:
            continue
    return False


def pids_holding(inodes: set[int], pids: Iterable[int]) -> set[int]:
    """Those of PIDS that hold one of INODES (a socket's inode) open."""
    targets = {f"socket:[{i}]" for i in inodes}
    return {pid for pid in pids if targets and _holds(pid, targets)}


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir(PROC) if p.isdigit()]


def port_owner_pids(port: int) -> set[int]:
    """Every process of this box (this network namespace) that holds PORT's listening socket.
    Walks all of /proc: use it once for a message or a scan, not in a tight loop."""
    inodes = listening_inodes(port)
    return pids_holding(inodes, _all_pids()) if inodes else set()


def command_of(pid: int, limit: int = 120) -> str:
    """PID's command line as a shell would show it, cut at LIMIT characters."""
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    text = " ".join(w.decode(errors="replace") for w in raw.split(b"\0") if w) or "?"
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- a unit's own processes -----------------------------------------------------------------------


def cgroup_of(pid: int | str = "self") -> str | None:
    """PID's cgroup v2 path ('0::/…' of /proc/PID/cgroup), else its name=systemd v1 path."""
    try:
        text = (PROC / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    by_controllers: dict[str, str] = {}
    for line in text.splitlines():
        _, controllers, where = ([*line.split(":", 2), "", ""])[:3]
        by_controllers[controllers] = where
    path = by_controllers.get("") or by_controllers.get("name=systemd")
    return path if path and path != "/" else None


def cgroup_dirs(cgroup: str) -> list[Path]:
    """Where CGROUP (a path like systemd's ControlGroup=) is mounted on this box."""
    rel = cgroup.strip("/")
    return [Path(m) / rel for m in CGROUP_MOUNTS if (Path(m) / rel / "cgroup.procs").exists()] or [
        d for d in [Path("/sys/fs/cgroup/systemd") / rel] if (d / "cgroup.procs").exists()
    ]


def unit_pids(cgroup: str | None) -> set[int]:
    """Every process in CGROUP and its subgroups (a unit's main, control and helper processes)."""
    pids: set[int] = set()
    for top in cgroup_dirs(cgroup) if cgroup else []:
        for dirpath, _dirs, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    pids.update(int(p) for p in Path(dirpath, "cgroup.procs").read_text().split())
                except (OSError, ValueError):
                    continue
        if pids:
            break
    return pids


def tree_pids(pid: int) -> set[int]:
    """PID and its descendants (/proc/PID/task/TID/children, walked down)."""
    found, todo = set(), [pid]
    while todo:
        cur = todo.pop()
        if cur in found:
            continue
        found.add(cur)
        try:
            tasks = os.listdir(f"/proc/{cur}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{cur}/task/{tid}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
            except (OSError, ValueError):
                continue
    return found


@dataclass
class Verdict:
    own: bool  # a listening socket of the port is held by the own processes, and none by another
    text: str  # what to print: who holds the port


@dataclass
class Owners:
    """The check of one gate: PORT is served by the processes of CGROUP (a unit's) or MAINPID's tree.
    `check()` reads the tables and the own pids' fds only; the other holders are looked for (the
    whole of /proc) only when the port is not the own processes', at most once per `name_every` checks."""

    port: int
    mainpid: int | None = None
    cgroup: str | None = None
    whose: str = "the engine's"  # "unit X's", in the texts
    name_every: int = 25
    netlink: bool = True  # False: /proc/net/tcp{,6} only, the fallback where sock_diag is refused (benched)
    _checks: int = field(default=0, repr=False)
    _named: str = field(default="", repr=False)

    def own_pids(self) -> set[int]:
        pids = unit_pids(self.cgroup)
        if self.mainpid:
            pids |= tree_pids(self.mainpid)
        return pids - {os.getpid()}

    def check(self) -> Verdict:
        self._checks += 1
        inodes = listening_inodes(self.port, netlink=self.netlink)
        if not inodes:
            return Verdict(False, f"nothing listens on port {self.port} on this box")
        own, held = self.own_pids(), {f"socket:[{i}]" for i in inodes}
        mine, claimed = set(), set()
        first = [self.mainpid] if self.mainpid in own else []
        for pid in first + sorted(own.difference(first)):  # the main process holds it, mostly
            got = _held_inodes(pid, held)
            if got:
                mine.add(pid)
                claimed |= got
            if claimed == held:
                break
        if claimed == held:
            return Verdict(True, f"port {self.port} is {self.whose} own (pid {', '.join(map(str, sorted(mine)))})")
        if not self._named or self._checks % self.name_every == 1:
            self._named = self.others(inodes, own)
        return Verdict(False, self._named)

    def others(self, inodes: set[int], own: set[int]) -> str:
        """Who holds PORT's listening socket instead (or beside) the own processes."""
        holders = pids_holding(inodes, [p for p in _all_pids() if p not in own])
        if not holders:
            return f"port {self.port} is held by a process whose files this gate cannot read, not by {self.whose} processes"
        named = "; ".join(f"pid {p} ({command_of(p)})" for p in sorted(holders)[:3])
        return f"port {self.port} is served by {named}, not by {self.whose} processes"


def _held_inodes(pid: int, targets: set[str]) -> set[str]:
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return set()
    out = set()
    for name in names:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if link in targets:
            out.add(link)
    return out
