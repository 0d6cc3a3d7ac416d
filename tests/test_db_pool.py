"""PostgreSQL connections are bounded (issue 31): the ASGI app under uvicorn, given many
concurrent logged-in requests, opens at most SPARKOPS_DB_POOL_MAX connections and answers no 5xx.

Counted on the server side (pg_stat_activity), by the application name the web process
connects with (PGAPPNAME, unique to this test), so other test workers' connections do not count."""

import asyncio
import os
import threading
import time
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from sparkops import webproc

ROOT = Path(__file__).resolve().parents[1]
POOL_MAX = 3
CLIENTS = 24
ROUNDS = 4


def _server_dsn():
    d = connection.settings_dict
    return f"host={d['HOST'] or '127.0.0.1'} port={d['PORT'] or 5432} user={d['USER']} dbname=postgres"


def _web(tmp_path, app_name):
    d = connection.settings_dict
    url = f"postgres://{d['USER']}@{d['HOST'] or '127.0.0.1'}:{d['PORT'] or 5432}/{d['NAME']}"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "sparkops.settings",
        "SECRET_KEY": settings.SECRET_KEY,
        "SPARKOPS_DB_POOL_MAX": str(POOL_MAX),
        "SPARKOPS_VAR_DIR": str(tmp_path / "var"),
        "PGAPPNAME": app_name,
    }
    env.pop("SPARKOPS_TEST_DB_NAME", None)
    log = tmp_path / "uvicorn.log"
    proc, base = webproc.start_web(env=env, log_path=log, timeout=30)
    return proc, base, log


async def _load(base, cookie, paths):
    statuses = []

    async def one_client(i):
        async with httpx.AsyncClient(base_url=base, cookies={"sessionid": cookie}, timeout=60) as client:
            for r in range(ROUNDS):
                resp = await client.get(paths[(i + r) % len(paths)])
                statuses.append(resp.status_code)

    await asyncio.gather(*(one_client(i) for i in range(CLIENTS)))
    return statuses


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_open_at_most_the_pool_max_connections(tmp_path, django_user_model, fleet):
    if connection.vendor != "postgresql":
        pytest.skip("a connection bound is PostgreSQL's (SQLite has no server connections)")
    user = django_user_model.objects.create_user("pool-viewer", password="pool-viewer-pw-1")
    client = Client()
    client.force_login(user)
    cookie = client.cookies["sessionid"].value

    app_name = f"sparkops-pool-test-{uuid.uuid4().hex[:8]}"
    proc, base, log = _web(tmp_path, app_name)
    peak, stop = [0], threading.Event()

    def watch():
        with psycopg.connect(_server_dsn(), autocommit=True) as conn:
            while not stop.is_set():
                (n,) = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [app_name]
                ).fetchone()
                peak[0] = max(peak[0], n)
                time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        statuses = asyncio.run(_load(base, cookie, ["/", "/api/engines/", "/alerts/", "/engines/", "/hosts/spark-1/"]))
    finally:
        stop.set()
        watcher.join(timeout=10)
        webproc.stop_web(proc)
    assert len(statuses) == CLIENTS * ROUNDS
    errors = [s for s in statuses if s >= 500]
    assert not errors, f"{len(errors)} × 5xx: {log.read_text()[-3000:]}"
    assert set(statuses) <= {200, 302}, sorted(set(statuses))
    assert 0 < peak[0] <= POOL_MAX, f"the web process held {peak[0]} connections at once (bound {POOL_MAX})"
