"""The one place that pushes live updates to browsers (Channels groups).

Call `publish_on_commit(group, event)` from services: it sends after the transaction
commits, so a browser never sees data the database does not have.

Groups: every page joins `GROUP_OVERVIEW` or the subject groups it shows
(`engine_group(id)`, `host_group(id)`); `GROUP_ALL` reaches every socket. A group is a
routing key, not a permission: an event is what every signed-in role may see (numbers and
read-only cards), so no event carries write controls."""

import asyncio
import logging
import threading
from dataclasses import asdict, dataclass, field
from functools import partial

from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

GROUP_ALL = "sparkops.all"
GROUP_OVERVIEW = "sparkops.overview"


def engine_group(engine_id):
    return f"engine.{int(engine_id)}"


def host_group(host_id):
    return f"host.{int(host_id)}"


@dataclass
class LiveEvent:
    type: str  # e.g. "engine.sample", "host.sample", "alert.changed", "changelog.entry"
    payload: dict = field(default_factory=dict)

    def as_message(self):
        return {"type": "live.event", "event": asdict(self)}


class _Publisher:
    """One event loop per process, on its own thread, for every group_send.

    async_to_sync per event would build a new loop and a new Redis connection each time —
    most of a poll's cost at one probe per engine per second. Sends are fire-and-forget
    from the caller's view (the poll never waits on Redis), in order, on a kept connection."""

    def __init__(self):
        self._loop = None
        self._lock = threading.Lock()
        self._in_order = None  # an asyncio.Lock of the loop: one group_send at a time

    def _ensure_loop(self):
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                self._loop = asyncio.new_event_loop()
                self._in_order = asyncio.Lock()
                threading.Thread(target=self._loop.run_forever, name="live-publisher", daemon=True).start()
            return self._loop

    @staticmethod
    async def _send(in_order, send):
        # group_send awaits Redis several times: two sent side by side could arrive out of order
        # (a sweep's "cell 2 done" after "cell 4 running"). The coroutines start in submission
        # order and asyncio.Lock wakes its waiters first come, first served, so they go in order.
        async with in_order:
            await send

    def submit(self, layer, group, message):
        loop = self._ensure_loop()
        future = asyncio.run_coroutine_threadsafe(self._send(self._in_order, layer.group_send(group, message)), loop)
        future.add_done_callback(partial(_log_failure, group))
        return future


def _log_failure(group, future):
    exc = future.exception()
    if exc is not None:  # Redis down must never fail a poll; the page shows "stale".
        log.warning("live publish to %s failed: %s", group, exc)


_publisher = _Publisher()


def publish(group, event: LiveEvent):
    """Send EVENT to GROUP; returns a concurrent Future (tests may wait on it), or None."""
    layer = get_channel_layer()
    if layer is None:
        return None
    return _publisher.submit(layer, group, event.as_message())


def publish_on_commit(group, event: LiveEvent):
    transaction.on_commit(lambda: publish(group, event))
