"""Loaded with `-p tests.xdist_env` (pyproject's addopts), before Django's settings are read.

Under pytest-xdist every worker runs its own share of the tests at the same time as the
others. pytest-django gives each worker its own test database (`test_…_gw0` → `…_1`); this
gives each its own Redis database and key prefix, so a test that empties its Redis database
(`flushdb`) or holds a poller lease never touches another worker's. Every test process (a
worker, or a run without xdist) also gets a runtime folder of its own (SPARKOPS_RUNTIME_DIR:
the box's start lock, the stop hook's socket), so no test contends for the machine's
/run/sparkops or another worker's lock and socket. Subprocesses that a test starts (uvicorn,
the stack, Celery workers) inherit all of them through the environment."""

import atexit
import os
import shutil
import tempfile
from urllib.parse import urlsplit, urlunsplit

_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw"):
    index = int(_worker[2:]) + 1
    url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    os.environ["REDIS_URL"] = urlunsplit(parts._replace(path=f"/{(base + index) % 16}"))
    prefix = os.environ.get("SPARKOPS_CHANNEL_PREFIX", "sparkops")
    os.environ["SPARKOPS_CHANNEL_PREFIX"] = f"{prefix}-{_worker}"

# One set by hand is kept; one this module made in the xdist controller is replaced in each worker.
if not os.environ.get("SPARKOPS_RUNTIME_DIR") or os.environ.get("SPARKOPS_TEST_RUNTIME_MADE") == "1":
    _runtime = tempfile.mkdtemp(prefix=f"sparkops-run-{_worker or 'main'}-")
    os.environ["SPARKOPS_RUNTIME_DIR"], os.environ["SPARKOPS_TEST_RUNTIME_MADE"] = _runtime, "1"
    atexit.register(shutil.rmtree, _runtime, ignore_errors=True)
