"""A free loopback port for a server SparkOps (or a test) starts next: `sparkops up`'s private Redis
and web server, the simulator's engines and supervisor, the tests' servers.

The usual idiom, bind port 0 and hand the port the kernel chose to the server, picks from the kernel's
ephemeral range (`net.ipv4.ip_local_port_range`, 32768-60999 by default), the range every outgoing
connection takes its local port from. Between the pick and the server's bind any client on the box
(an HTTP poll, a database connection) may take that port: a simulated engine in the test suite met
`[Errno 98] address already in use` on its port and crash-looped into its start limit. A port below
the ephemeral range is never taken by an outgoing connection, so this picks a random one there that
binds now, and falls back to the kernel's choice where the range leaves no room below it.

Two pickers that run at once (two test workers, two stacks on one box) can still pick the same free
port before either binds it, or one can take a port a stopped engine is about to bind again:
`SPARKOPS_PORT_RANGE=LOW-HIGH` gives each its own block (the test suite gives each xdist worker
one). One process never hands out the same port twice (a simulator picks all its engines' ports
before any of them binds)."""

from __future__ import annotations

import os
import random
import socket

BELOW_FROM = 20000  # the lowest port picked: above the usual fixed service ports (PostgreSQL, Redis, …)
TRIES = 64
RANGE_ENV = "SPARKOPS_PORT_RANGE"
_handed_out: set[int] = set()  # this process's picks, never repeated


def port_range(value: str | None = None) -> tuple[int, int] | None:
    """`SPARKOPS_PORT_RANGE`'s LOW-HIGH (HIGH excluded), or None when it is unset; ValueError says
    what is wrong with a bad one."""
    value = os.environ.get(RANGE_ENV, "") if value is None else value
    if not value.strip():
        return None
    try:
        low, high = (int(x) for x in value.split("-"))
    except ValueError:
        raise ValueError(f"{RANGE_ENV}={value!r}: expected LOW-HIGH, two port numbers such as 20000-22000") from None
    if not 1024 <= low < high <= 65536 or high - low < 16:
        raise ValueError(f"{RANGE_ENV}={value!r}: expected 1024 <= LOW, LOW + 16 <= HIGH <= 65536")
    return low, high


def ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        with open(path) as fh:
            low, high = (int(x) for x in fh.read().split()[:2])
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def _binds(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback TCP port that binds now, not handed out before by this process: in
    `SPARKOPS_PORT_RANGE` when it is set, else below the ephemeral range where there is room."""
    block = port_range()
    if block is None:
        low, _high = ephemeral_range()
        block = (BELOW_FROM, low) if low - BELOW_FROM >= 1000 else None
    if block is not None:
        pick = random.SystemRandom()
        for _ in range(TRIES):
            port = pick.randrange(*block)
            if port not in _handed_out and _binds(port):
                _handed_out.add(port)
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    _handed_out.add(port)
    return port
