import asyncio

import pytest

from simulator.core import EngineConfig
from simulator.engine import create_engine


@pytest.fixture
def engine_factory():
    """Start in-process engines in a private loop thread; yields a starter function."""
    import threading

    from simulator.fleet import FleetThread  # noqa: F401  (same loop-thread approach)

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
    """Verbatim llama-server captures (copied from the project's reference material)."""
    from pathlib import Path

    return Path(__file__).resolve().parent.parent / "fixtures" / "reference"


@pytest.fixture
def engine_process():
    """A simulated engine in its own process (no GIL sharing with the test client)."""
    import subprocess
    import sys
    import time as _time

    import httpx

    from simulator.supervisor import REPO_ROOT
    from sparkops.ports import free_port

    procs = []

    def start(**opts):
        port = free_port()
        cmd = [sys.executable, "-m", "simulator.engine", "--port", str(port), "--load-seconds", "0"]
        for k, v in opts.items():
            cmd += [f"--{k.replace('_', '-')}", str(v)]
        procs.append(subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.DEVNULL))
        url = f"http://127.0.0.1:{port}"
        deadline = _time.monotonic() + 10
        while _time.monotonic() < deadline:
            try:
                httpx.get(url + "/_sim/state", timeout=0.5)
                return url
            except httpx.HTTPError:
                _time.sleep(0.05)
        raise TimeoutError("engine did not start")

    yield start
    for p in procs:
        p.terminate()
        p.wait(10)
