"""A long-lived event loop and HTTP client per worker thread.

Polls run every second or two: reusing one loop and one keep-alive client per thread
saves a TLS context and a TCP handshake per engine per poll (the poll-overhead bench)."""

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from dashboard import http

_local = threading.local()
T = TypeVar("T")


def _loop_and_client() -> tuple[asyncio.AbstractEventLoop, http.AsyncClient]:
    if getattr(_local, "loop", None) is None or _local.loop.is_closed():
        _local.loop = asyncio.new_event_loop()
        _local.client = None
    if _local.client is None:
        asyncio.set_event_loop(_local.loop)
        _local.client = http.async_client(headers=http.POLL_HEADERS, limit_per_host=8)
    return _local.loop, _local.client


def run(make_coro: Callable[[http.AsyncClient], Coroutine[Any, Any, T]]) -> T:
    """Run `make_coro(client)` to completion on this thread's loop."""
    loop, client = _loop_and_client()
    return loop.run_until_complete(make_coro(client))


def close() -> None:
    """Cancel what is still running on this thread's loop (fetches kept across ticks), close
    its client, then the loop."""
    loop = getattr(_local, "loop", None)
    if loop and not loop.is_closed():
        pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        if _local.client is not None:
            loop.run_until_complete(_local.client.aclose())
        loop.close()
    _local.loop = _local.client = None
