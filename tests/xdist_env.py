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
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
from _pytest.nodeid import NodeId

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


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """`--dist loadgroup` keeps a group's tests on one worker by the `@NAME` suffix of their node
    ids. pytest-xdist 3.8 writes that suffix to `item._nodeid`, which pytest 9.2 no longer reads
    (a node's id is `item._id`, a NodeId), so every group was silently split across the workers.
    This runs after pytest-xdist's hook and writes the suffixed id where pytest reads it
    (tests/test_xdist_groups.py fails without it). Remove it once pytest-xdist does so itself."""
    for item in items:
        suffixed = item.__dict__.get("_nodeid")
        if isinstance(suffixed, str) and suffixed != item.nodeid:
            item._id = NodeId.parse(suffixed)


def pytest_configure(config):
    """The controller names the run (pytest-xdist hands `testrunuid` to every worker), so that it
    knows which template database its workers cloned (tests/testdb.py) and can drop it at the end."""
    workers = getattr(config.option, "numprocesses", None)
    if not hasattr(config, "workerinput") and workers and not config.getoption("testrunuid", None):
        config.option.testrunuid = uuid.uuid4().hex


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    """The controller's end of the run (its workers have ended): drop the template they cloned."""
    config = session.config
    testrunuid = getattr(config.option, "testrunuid", None)
    if hasattr(config, "workerinput") or not testrunuid:
        return
    from tests import testdb

    if not testdb.template_made(testrunuid):  # no worker used the database (or not a Django run)
        return
    from pytest_django.plugin import blocking_manager_key

    with config.stash[blocking_manager_key].unblock():
        testdb.drop_template(testrunuid)
