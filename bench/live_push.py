"""Live push latency: 20 WebSocket clients on the overview; the time from a poll committing
to EVERY client having received its "engine.sample" update. Target: p95 ≤ 250 ms.

It runs the real path: uvicorn serving sparkops.asgi (subprocess), the Redis channel layer,
the live consumer, and in this process a transaction that stores a reading and then hands
it to a `LivePublisher` after commit, as the poller's tick does (it renders the card and
publishes). The clock starts in the transaction's on_commit hook.

Samples are pushed only while a viewer is present (sparkops/live/presence.py): the clients'
sockets mark it in Redis on connect, before their hello, so every measured poll is pushed.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/sparkops_bench REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python bench/live_push.py [--clients 20] [--polls 200] [--gap-ms 100]

The database is migrated; a host, an engine and a user named bench-live-* are created and
removed again.
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import threading
import time

from django.contrib.auth import get_user_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")

import django  # noqa: E402

django.setup()

import websockets  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from dashboard.models import Engine, Host  # noqa: E402
from sparkops.live.publish import LivePublisher  # noqa: E402
from sparkops.webproc import start_web, stop_web  # noqa: E402

LIVE = LivePublisher()

NAME = "bench-live"


def setup_fleet():

    call_command("migrate", verbosity=0)
    host, _ = Host.objects.get_or_create(name=f"{NAME}-host")
    engine, _ = Engine.objects.update_or_create(
        name=f"{NAME}-engine", defaults={"kind": "vllm", "url": "http://127.0.0.1:9", "host": host, "status": "up"}
    )
    user, _ = get_user_model().objects.get_or_create(username=f"{NAME}-user")
    client = Client()
    client.force_login(user)
    return host, engine, user, client.cookies["sessionid"].value


def teardown_fleet(host, engine, user):
    engine.delete()
    host.delete()
    user.delete()


class Clients:
    """N sockets in one asyncio loop (own thread); records when each saw each sequence number."""

    def __init__(self, base, cookie, n, engine_id):
        self.base, self.cookie, self.n, self.engine_id = base, cookie, n, engine_id
        self.seen = {}  # seq -> list of perf_counter() arrival times
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self):
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._open_all(), self.loop).result(timeout=60)

    async def _open_all(self):
        self.sockets = [await self._open() for _ in range(self.n)]
        self.tasks = [asyncio.ensure_future(self._read(ws)) for ws in self.sockets]

    async def _open(self):
        ws = await websockets.connect(
            f"ws://{self.base}/ws/live/?groups=overview",
            additional_headers={"Cookie": f"sessionid={self.cookie}", "Origin": f"http://{self.base}"},
        )
        hello = json.loads(await ws.recv())
        assert hello["type"] == "live.hello", hello
        return ws

    async def _read(self, ws):
        async for raw in ws:
            arrived = time.perf_counter()
            event = json.loads(raw)
            payload = event.get("payload") or {}
            if event.get("type") == "engine.sample" and payload.get("id") == self.engine_id:
                seq = int(payload["points"].get("requests_running", -1))
                with self.lock:
                    self.seen.setdefault(seq, []).append(arrived)

    def count(self, seq):
        with self.lock:
            return len(self.seen.get(seq, ()))

    def close(self):
        async def shut():
            for ws in self.sockets:
                await ws.close()

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)


def one_poll(engine, seq):
    """Store a reading like a poll does; return the perf_counter() of the commit."""
    reading = {
        "up": True,
        "status": "up",
        "models": ["bench"],
        "requests_running": seq,
        "requests_waiting": 0,
        "generation_tokens_per_s": 60.0 + seq % 7,
        "kv_cache_usage": 0.3,
        "prefix_cache_hit_rate": 0.9,
    }
    committed = {}
    with transaction.atomic():
        engine.latest, engine.last_poll_at = reading, timezone.now()
        engine.save(update_fields=["latest", "last_poll_at"])
        transaction.on_commit(lambda: committed.setdefault("t", time.perf_counter()))
        transaction.on_commit(lambda: LIVE.engines_polled([(engine, reading)]))
    return committed["t"]


def measure(clients, engine, polls, gap_s, timeout_s=5.0):
    latencies, lost = [], 0
    for seq in range(polls):
        t0 = one_poll(engine, seq)
        deadline = time.perf_counter() + timeout_s
        while clients.count(seq) < clients.n and time.perf_counter() < deadline:
            time.sleep(0.001)
        if clients.count(seq) < clients.n:
            lost += 1
            continue
        with clients.lock:
            latencies.append((max(clients.seen[seq]) - t0) * 1000)
        time.sleep(gap_s)
    return latencies, lost


def pct(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--polls", type=int, default=200)
    parser.add_argument("--gap-ms", type=float, default=100.0, help="pause between polls")
    args = parser.parse_args()
    host, engine, user, cookie = setup_fleet()
    web, url = start_web()
    base = url.removeprefix("http://")  # host:port, for the ws:// and http:// URLs below
    clients = Clients(base, cookie, args.clients, engine.id)
    try:
        clients.start()
        one_poll(engine, 10**6)  # warm-up: template cache, Redis connections
        time.sleep(0.5)
        latencies, lost = measure(clients, engine, args.polls, args.gap_ms / 1000)
    finally:
        clients.close()
        stop_web(web)
        teardown_fleet(host, engine, user)
    if not latencies:
        raise SystemExit(f"no poll reached all {args.clients} clients")
    print(
        f"live push: {args.clients} WebSocket clients, {len(latencies)} polls ({lost} not received by all within 5 s)"
    )
    print(
        f"commit -> every client received: p50 {pct(latencies, 50):.1f} ms  p95 {pct(latencies, 95):.1f} ms  "
        f"max {max(latencies):.1f} ms  mean {statistics.fmean(latencies):.1f} ms  (target p95 <= 250 ms)"
    )


if __name__ == "__main__":
    main()
