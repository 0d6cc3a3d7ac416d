"""A free loopback port for a server SparkOps (or a test) starts next: `sparkops up`'s private Redis
and web server, the simulator's engines and supervisor, the tests' servers.

The usual idiom, bind port 0 and hand the port the kernel chose to the server, picks from the kernel's
ephemeral range (`net.ipv4.ip_local_port_range`, 32768-60999 by default), the range every outgoing
connection takes its local port from. Between the pick and the server's bind any client on the box
(an HTTP poll, a database connection) may take that port: a simulated engine in the test suite met
`[Errno 98] address already in use` on its port and crash-looped into its start limit. A port below
the ephemeral range is never taken by an outgoing connection, so this picks a random one there that
binds now, and falls back to the kernel's choice where the range leaves no room below it."""

from __future__ import annotations

import random
import socket

BELOW_FROM = 20000  # the lowest port picked: above the usual fixed service ports (PostgreSQL, Redis, …)
TRIES = 64


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
    """A loopback TCP port that binds now, below the ephemeral range where there is room."""
    low, _high = ephemeral_range()
    if low - BELOW_FROM >= 1000:
        pick = random.SystemRandom()
        for _ in range(TRIES):
            port = pick.randrange(BELOW_FROM, low)
            if _binds(port):
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
