"""Benchmark fixtures: simulated engines (simulator) and a scripted SSE server,
each served from an asyncio loop in a background thread, so the sync services under
test drive real sockets."""

import asyncio
import threading

import pytest

from dashboard.models import Engine, Host
from simulator.core import EngineConfig
from simulator.engine import create_engine

from .servers import ScriptedServer


class LoopThread:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout=30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self):
        self.run(self._cancel_all())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    @staticmethod
    async def _cancel_all():
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture
def loop_thread():
    lt = LoopThread()
    yield lt
    lt.stop()


@pytest.fixture
def sim(loop_thread):
    """Factory: sim(kind="vllm", rate=..., ...) -> a started simulated engine."""
    started = []

    def start(kind="vllm", **opts):
        opts.setdefault("load_seconds", 0.0)
        opts.setdefault("ttft", 0.005)
        opts.setdefault("rate", 2000.0)
        engine = loop_thread.run(create_engine(EngineConfig(kind=kind, **opts)))
        started.append(engine)
        return engine

    yield start
    for engine in started:
        loop_thread.run(engine.close())


@pytest.fixture
def scripted(loop_thread):
    servers = []

    def start(script, **kw):
        server = loop_thread.run(ScriptedServer(script, **kw).start())
        servers.append(server)
        return server

    yield start
    for server in servers:
        loop_thread.run(server.close())


@pytest.fixture
def host(db):
    return Host.objects.create(name="bench-box")


@pytest.fixture
def make_engine(host):
    """Register a DB Engine for a running server; `window` goes into latest like the collectors'."""

    def make(url, *, kind="vllm", name="eng", window=32768, **latest):
        return Engine.objects.create(
            name=name, kind=kind, url=url, host=host, status="up", latest={"window": window, **latest}
        )

    return make
