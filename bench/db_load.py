"""Many logged-in users against the whole stack: 5xx count, latency, database connections held,
/healthz and the poller's cadence under the load (issue 31).

`sparkops up` (web, worker, beat) watches one simulated vLLM engine; N clients (default 50),
each with its own session, fetch the main pages and the engines API back to back for the
duration (default 120 s), while a checker asks /healthz once a second. Printed: requests,
5xx and other errors, p50/p99 latency, /healthz answers, on PostgreSQL the most connections
the stack's processes held at once (pg_stat_activity for the database) and those still held
12 s after the load, and the gaps between the engine's stored samples during the load (the
2 s poll cadence held, or not).

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/sparkops_bench \\
        .venv/bin/python bench/db_load.py [--clients 50] [--duration 120] [--pool-max 10]

SQLite under a temp dir unless BENCH_DATABASE_URL names a PostgreSQL database (created if
missing, migrated; the bench's users and engine are added to it). Uses REDIS_URL if set,
else `sparkops up` starts a private Redis.

Measured 2026-12-01 on this 2-core VM (load average 2-4 from the stack itself), defaults (pool
max 10 per process), 50 clients × 120 s:
- PostgreSQL 15 (max_connections 100): 14,729 requests (122/s), 0 × 5xx, 0 other errors, p50
  390 ms, p99 613 ms, max 1.69 s; /healthz 119 of 119 answered 200; at most 19 connections at
  once (web, worker, beat: bound 30), 17 held 12 s after (the pools' floors and idle ones not yet
  past max_idle); 58 samples stored, gaps median 2.00 s, max 2.49 s (the 2 s cadence held).
- SQLite: 14,454 requests (120/s), 0 × 5xx, p50 398 ms, p99 628 ms, max 2.70 s; /healthz 120 of
  120; 58 samples, gaps median 2.00 s, max 2.15 s.
Before the pool (CONN_MAX_AGE 60) 20 clients × 2 min on PostgreSQL had 3,031 of 8,104 requests
answer 500 (issue 31)."""

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import threading
import time
from urllib.parse import urlparse

import httpx
from _alerts_stack import PY, ROOT, Stack, percentile

PAGES = ["/", "/engines/", "/api/engines/", "/alerts/", "/changelog/", "/hosts/bench-box/"]

SESSIONS_SCRIPT = """
import json, sys
from django.contrib.auth import get_user_model
from django.test import Client
keys = []
for i in range({n}):
    user, _ = get_user_model().objects.get_or_create(username=f"bench-load-{{i}}")
    client = Client()
    client.force_login(user)
    keys.append(client.cookies["sessionid"].value)
print(json.dumps(keys))
"""

CADENCE_SCRIPT = """
import json
from datetime import datetime, timezone
from dashboard.models import Engine, Sample, Series
t0, t1 = (datetime.fromtimestamp(t, timezone.utc) for t in ({t0}, {t1}))
engine = Engine.objects.get(name="{engine}")
best = []
for series in Series.objects.filter(engine=engine):
    ts = list(Sample.objects.filter(series=series, ts__gte=t0, ts__lte=t1).order_by("ts").values_list("ts", flat=True))
    if len(ts) > len(best):
        best = ts
gaps = [(b - a).total_seconds() for a, b in zip(best, best[1:])]
print(json.dumps({{"samples": len(best), "gaps": gaps}}))
"""


def free_port():

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def manage_json(stack, script):

    out = subprocess.run(
        [PY, "manage.py", "shell", "-c", script], cwd=ROOT, env=stack.env, check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def ensure_database(url):
    """Create the PostgreSQL database the URL names if it is missing."""
    import psycopg

    parts = urlparse(url)
    name = parts.path.lstrip("/")
    admin = parts._replace(path="/postgres").geturl().replace("postgres://", "postgresql://", 1)
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    return admin, name


class ConnectionWatch:
    """Samples how many connections the database has (other than this one) every 0.25 s."""

    def __init__(self, admin_url, db_name):
        self.admin_url, self.db_name = admin_url, db_name
        self.peak, self.last, self.stop = 0, 0, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def count(self, conn):
        sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
        return conn.execute(sql, [self.db_name]).fetchone()[0]

    def run(self):
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            while not self.stop.is_set():
                self.last = self.count(conn)
                self.peak = max(self.peak, self.last)
                time.sleep(0.25)

    def now(self):
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            return self.count(conn)


async def client_loop(base, key, deadline, results, i):
    async with httpx.AsyncClient(base_url=base, cookies={"sessionid": key}, timeout=60) as client:
        n = i
        while time.monotonic() < deadline:
            path = PAGES[n % len(PAGES)]
            n += 1
            t = time.perf_counter()
            try:
                resp = await client.get(path)
                results.append((resp.status_code, time.perf_counter() - t, path))
            except httpx.HTTPError as exc:
                results.append((type(exc).__name__, time.perf_counter() - t, path))


async def health_loop(base, deadline, answers):
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        while time.monotonic() < deadline:
            t = time.monotonic()
            try:
                answers.append((await client.get("/healthz")).status_code)
            except httpx.HTTPError as exc:
                answers.append(type(exc).__name__)
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - t)))


async def load(base, keys, duration):
    deadline = time.monotonic() + duration
    results, health = [], []
    await asyncio.gather(
        health_loop(base, deadline, health), *(client_loop(base, k, deadline, results, i) for i, k in enumerate(keys))
    )
    return results, health


def wait_web(base, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if httpx.get(base + "/livez", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the web did not answer within {timeout} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--duration", type=float, default=120.0, help="seconds of load")
    ap.add_argument("--pool-max", type=int, default=None, help="SPARKOPS_DB_POOL_MAX for the stack (default: its own)")
    args = ap.parse_args()

    stack = Stack(web_port=free_port())
    if args.pool_max is not None:
        stack.env["SPARKOPS_DB_POOL_MAX"] = str(args.pool_max)
    db_url = stack.env.get("DATABASE_URL", "")
    watch = None
    if db_url.startswith(("postgres://", "postgresql://")):
        watch = ConnectionWatch(*ensure_database(db_url))
    base = f"http://127.0.0.1:{stack.web_port}"
    try:
        engine = stack.start_simulator()
        stack.run("migrate", "-v", "0")
        # A database used before holds the engine of the last run (on another port): retire it first.

        subprocess.run(
            [PY, "manage.py", "engine", "remove", engine["name"]],
            cwd=ROOT,
            env=stack.env,
            capture_output=True,
            check=False,
        )
        stack.run("engine", "add", engine["name"], "--kind", "vllm", "--url", engine["url"], "--unit", engine["unit"])
        keys = manage_json(stack, SESSIONS_SCRIPT.format(n=args.clients))
        stack.start_up()
        wait_web(base)
        time.sleep(5)  # the worker's first poll and the leader's first sweep
        if watch:
            watch.thread.start()
        t0 = time.time()
        results, health = asyncio.run(load(base, keys, args.duration))
        t1 = time.time()
        if watch:
            watch.stop.set()
            watch.thread.join(timeout=5)
        time.sleep(12)  # the worker stores what it holds every SPARKOPS_FLUSH_INTERVAL (10 s)
        if watch:
            after = watch.now()
        cadence = manage_json(stack, CADENCE_SCRIPT.format(t0=t0 + 2, t1=t1 - 2, engine=engine["name"]))
    finally:
        stack.stop()

    db = "PostgreSQL" if watch else "SQLite"
    pool = os.environ.get("SPARKOPS_DB_POOL_MAX", "10") if args.pool_max is None else args.pool_max
    latencies = [lat * 1000 for _, lat, _ in results]
    server_errors = [s for s, _, _ in results if isinstance(s, int) and s >= 500]
    other = [s for s, _, _ in results if not isinstance(s, int) or (400 <= s < 500)]
    print(f"{db}, {args.clients} clients × {args.duration:.0f} s" + (f", pool max {pool} per process" if watch else ""))
    print(
        f"  requests: {len(results)} ({len(results) / (t1 - t0):.1f}/s), 5xx: {len(server_errors)}, other errors: {len(other)}"
    )
    if latencies:
        print(
            f"  latency ms: p50 {percentile(latencies, 0.5):.0f}, p99 {percentile(latencies, 0.99):.0f}, "
            f"max {max(latencies):.0f}"
        )
    by_path = {}
    for _status, lat, path in results:
        by_path.setdefault(path, []).append(lat * 1000)
    for path, lats in sorted(by_path.items()):
        print(f"    {path:<20} n={len(lats):<6} p50 {percentile(lats, 0.5):.0f}  p99 {percentile(lats, 0.99):.0f}")
    ok = sum(1 for s in health if s == 200)
    print(f"  /healthz: {ok} of {len(health)} answered 200; others: {sorted({str(s) for s in health if s != 200})}")
    if watch:
        print(f"  connections to the database: peak {watch.peak}, 12 s after the load {after}")
    gaps = cadence["gaps"]
    if gaps:
        print(
            f"  engine samples stored during the load: {cadence['samples']}, gap median "
            f"{statistics.median(gaps):.2f} s, max {max(gaps):.2f} s (poll interval 2 s)"
        )
    else:
        print("  engine samples stored during the load: none")
    if server_errors:
        raise SystemExit(f"{len(server_errors)} × 5xx (see {stack.dir}/up.log)")


if __name__ == "__main__":
    main()
