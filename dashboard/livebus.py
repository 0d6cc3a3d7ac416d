"""The one place that pushes live updates to browsers (Channels groups).

Call `publish_on_commit(group, event)` from services: it sends after the transaction
commits, so a browser never sees data the database does not have.

Groups: every page joins `GROUP_OVERVIEW`, `GROUP_FLEET` or the subject groups it shows
(`engine_group(id)`, `host_group(id)`); `GROUP_ALL` reaches every socket. A group is a
routing key, not a permission: an event is what every signed-in role may see (numbers and
read-only cards), so no event carries write controls.

It sits beside the packages, not in live/: alerts, the change log and measured runs publish
through it, and the live pages (cards, charts) read their tables, so a bus inside live/ made
each of those packages and live/ import each other."""

import asyncio
import logging
import threading
from collections.abc import Awaitable
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from channels.layers import BaseChannelLayer, get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

GROUP_ALL = "sparkops.all"
GROUP_OVERVIEW = "sparkops.overview"
GROUP_FLEET = "sparkops.fleet"  # the Hosts page's grid: "fleet.delta" events only (live/fleet.py)


def engine_group(engine_id: int) -> str:
    return f"engine.{int(engine_id)}"


def host_group(host_id: int) -> str:
    return f"host.{int(host_id)}"


@dataclass
class LiveEvent:
    type: str  # e.g. "engine.sample", "host.sample", "alert.changed", "changelog.entry"
    payload: dict[str, Any] = field(default_factory=dict)  # JSON-ready; its shape is the event type's

    def as_message(self) -> dict[str, Any]:
        return {"type": "live.event", "event": asdict(self)}


class _Publisher:
    """One event loop per process, on its own thread, for every group_send.

    async_to_sync per event would build a new loop and a new Redis connection each time —
    most of a poll's cost at one probe per engine per second. Sends are fire-and-forget
    from the caller's view (the poll never waits on Redis), in order, on a kept connection."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._in_order: asyncio.Lock | None = None  # an asyncio.Lock of the loop: one group_send at a time

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                self._loop = asyncio.new_event_loop()
                self._in_order = asyncio.Lock()
                threading.Thread(target=self._loop.run_forever, name="live-publisher", daemon=True).start()
            return self._loop

    @staticmethod
    async def _send(in_order: asyncio.Lock, send: Awaitable[None]) -> None:
        # group_send awaits Redis several times: two sent side by side could arrive out of order
        # (a sweep's "cell 2 done" after "cell 4 running"). The coroutines start in submission
        # order and asyncio.Lock wakes its waiters first come, first served, so they go in order.
        async with in_order:
            await send

    def submit(self, layer: BaseChannelLayer, group: str, message: dict[str, Any]) -> "Future[None]":
        loop = self._ensure_loop()
        in_order = self._in_order
        assert in_order is not None  # made with the loop, never unset
        future = asyncio.run_coroutine_threadsafe(self._send(in_order, layer.group_send(group, message)), loop)
        future.add_done_callback(partial(_log_failure, group))
        return future


def _log_failure(group: str, future: "Future[None]") -> None:
    exc = future.exception()
    if exc is not None:  # Redis down must never fail a poll; the page shows "stale".
        log.warning("live publish to %s failed: %s", group, exc)


_publisher = _Publisher()


def publish(group: str, event: LiveEvent) -> "Future[None] | None":
    """Send EVENT to GROUP; returns a concurrent Future (tests may wait on it), or None."""
    layer = get_channel_layer()
    if layer is None:
        return None
    return _publisher.submit(layer, group, event.as_message())


def publish_on_commit(group: str, event: LiveEvent) -> None:
    transaction.on_commit(lambda: publish(group, event))
