"""Many simulated engines in one asyncio loop (one port each), for fleet poll benchmarks:

    fleet = await serve_many(150, kind="vllm", background_rps=1)
    fleet.urls  # ['http://127.0.0.1:PORT', ...]
    await fleet.close()

or from synchronous code: `with FleetThread(150) as fleet: fleet.urls`.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from .core import EngineConfig
from .engine import create_engine


class Fleet:
    def __init__(self, engines) -> None:
        self.engines = engines

    @property
    def urls(self) -> list[str]:
        return [e.url for e in self.engines]

    async def close(self) -> None:
        await asyncio.gather(*(e.close() for e in self.engines))

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


async def serve_many(
    n: int, kind: str = "vllm", *, name_prefix: str = "fleet", load_seconds: float = 0.0, **options: Any
) -> Fleet:
    """Start n engines of one kind on free loopback ports in the running loop."""
    configs = [
        EngineConfig(kind=kind, name=f"{name_prefix}-{i}", load_seconds=load_seconds, seed=i + 1, **options)
        for i in range(n)
    ]
    engines = await asyncio.gather(*(create_engine(c) for c in configs))
    return Fleet(list(engines))


class FleetThread:
    """serve_many in a background thread's own event loop, for synchronous callers."""

    def __init__(self, n: int, kind: str = "vllm", **options: Any) -> None:
        self.n, self.kind, self.options = n, kind, options
        self.loop = asyncio.new_event_loop()
        self.fleet: Fleet | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> Fleet:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(serve_many(self.n, self.kind, **self.options), self.loop)
        self.fleet = fut.result(60)
        return self.fleet

    def __exit__(self, *exc: Any) -> None:
        if self.fleet:
            asyncio.run_coroutine_threadsafe(self.fleet.close(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
