import asyncio

import pytest

from dashboard.simulator.core import EngineConfig
from dashboard.simulator.engine import create_engine


@pytest.fixture
def engine_factory():
    """Start in-process engines in a private loop thread; yields a starter function."""
    from dashboard.simulator.fleet import FleetThread  # noqa: F401  (same loop-thread approach)
    import threading

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    started = []

    def start(**opts):
        opts.setdefault("load_seconds", 0.0)
        engine = asyncio.run_coroutine_threadsafe(create_engine(EngineConfig(**opts)), loop).result(10)
        started.append(engine)
        return engine

    yield start
    for e in started:
        asyncio.run_coroutine_threadsafe(e.close(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


@pytest.fixture
def reference_dir():
    from pathlib import Path
    path = Path("/work/shared/reference")
    if not path.exists():
        pytest.skip("reference captures not available")
    return path
