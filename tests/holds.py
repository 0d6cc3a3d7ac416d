"""A loopback route that never answers, for the tests of timeouts: instead of sleeping a few
seconds (which a loaded box can outlast, or a fast one waste) it holds the request until its client
gives up, and records in order what happened, so a test asserts which event ended a request rather
than how long it took."""

import select
import threading
from http.server import BaseHTTPRequestHandler

HOLD_S = 30.0  # how long a held request waits for its client: far past any poll's timeout


class Hold:
    """A route that never answers: it holds the request until the client gives up (closes the
    connection) or HOLD_S pass, then hangs up. `log` records, in order, each request held and each
    client that gave up, beside what other routes append; `expired` is set if a client never gave
    up, so a client that ignored its timeout is seen failing, not timing out."""

    def __init__(self, log: list | None = None) -> None:
        self.log = log if log is not None else []
        self.arrived, self.expired = threading.Event(), threading.Event()

    def __call__(self, handler: BaseHTTPRequestHandler) -> None:
        self.log.append(("held", handler.path))
        self.arrived.set()
        readable, _, _ = select.select([handler.connection], [], [], HOLD_S)
        if readable:
            self.log.append(("gave up", handler.path))  # the client closed: its EOF is readable
        else:
            self.expired.set()
        handler.close_connection = True
