"""Loaded with `-p tests.xdist_env` (pyproject's addopts), before Django's settings are read.

Under pytest-xdist every worker runs its own share of the tests at the same time as the
others. pytest-django gives each worker its own test database (`test_…_gw0` → `…_1`); this
gives each its own Redis database and key prefix, so a test that empties its Redis database
(`flushdb`) or holds a poller lease never touches another worker's. Subprocesses that a test
starts (uvicorn, the stack, Celery workers) inherit both through the environment."""

import os
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
