"""The Hosts grid at 50 boxes × 3 engines (issue 48, item 6): what keeping it live costs the web
server and the browser. Printed, with the load average: the web server's CPU seconds per second
(psutil on the uvicorn process), the WebSocket bytes and frames per second the page received
(Chromium's own count, CDP Network.webSocketFrameReceived), the page's JS and layout time per
second (CDP Performance.getMetrics), and the leader's watch per tick; with --pages hosts,live the
same load with the Live overview open instead, for comparison.

The real path: uvicorn serving sparkops.asgi (subprocess), the Redis channel layer, the live
consumer, Debian's Chromium (headless) on /hosts/. No worker runs: this process does what 50
workers and their leader would, every 2 s: each engine's reading stored (one bulk UPDATE) and
published (`LivePublisher.engines_polled`, its cards rendered, as each worker's tick does), each
box's report stored every SPARKOPS_FLUSH_INTERVAL, and the leader's `FleetWatch.tick`. The
changes a fleet sees: an engine down every 6 s (up again 6 s later), one box cut for 30 s (stale,
then unreachable, then back), one box's clock 8 s off for 30 s.

    REDIS_URL=redis://127.0.0.1:6379/0 .venv/bin/python bench/fleet_overview.py \\
        [--boxes 50] [--seconds 60] [--pages hosts,live]

Without DATABASE_URL it makes a SQLite database of its own anew in /tmp at each run."""

import argparse
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")
os.environ.setdefault("DATABASE_URL", f"sqlite:///{tempfile.gettempdir()}/sparkops-bench-fleet-overview.sqlite3")
# A prefix of the run's own: the groups of an earlier run keep the channels of its closed sockets for a
# day, and a send to each of them would be counted here as dropped.
os.environ.setdefault("SPARKOPS_CHANNEL_PREFIX", f"bench-fleet-overview-{os.getpid()}")
# Playwright's sync API holds an event loop in the main thread; its Django calls are plain sync ones.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

TICK_S = 2.0
CUT, SKEWED = (7, 15)  # the box cut for a while, the box whose clock goes off


class Dropped(logging.Handler):
    """Counts the events channels_redis dropped for a socket over its channel's capacity (it logs
    each at INFO), instead of printing them."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.n = 0

    def emit(self, record):
        self.n += "over capacity" in record.getMessage()


DROPPED = Dropped()


def fresh_database():
    """A database made anew (SQLite: the file removed first) and migrated."""
    from django.conf import settings
    from django.core.management import call_command

    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        Path(db["NAME"]).unlink(missing_ok=True)
    call_command("migrate", verbosity=0)


def reading(tick: int, up: bool) -> dict:
    """A vLLM reading as a poll stores it."""
    if not up:
        return {"up": False, "status": "down", "error": "connection refused"}
    return {
        "up": True,
        "status": "up",
        "models": ["qwen3-8b"],
        "requests_running": tick % 5,
        "requests_waiting": tick % 2,
        "kv_cache_usage": 0.3 + (tick % 10) / 50,
        "prefix_cache_hit_rate": 0.9,
        "prompt_tokens_per_s": 800.0 + tick % 7,
        "generation_tokens_per_s": 60.0 + tick % 9,
    }


class Fleet(threading.Thread):
    """What the fleet's workers and leader publish, every TICK_S, until stopped."""

    def __init__(self, hosts, engines):
        from sparkops.live.fleet import FleetWatch
        from sparkops.live.publish import LivePublisher

        super().__init__(daemon=True)
        self.hosts, self.engines = hosts, engines
        self.live, self.watch = LivePublisher(), FleetWatch()
        self.halt = threading.Event()
        self.ticks, self.late = 0, 0
        self.watch_cpu: list[float] = []  # thread CPU seconds of each watch tick

    def run(self):
        from django.db import connection

        start = time.monotonic()
        try:
            while not self.halt.is_set():
                self.tick(self.ticks)
                self.ticks += 1
                wait = start + self.ticks * TICK_S - time.monotonic()
                self.late += wait < 0
                self.halt.wait(max(0.0, wait))
        finally:
            connection.close()

    def tick(self, n: int):
        from django.db.models.functions import Now
        from django.utils import timezone

        from dashboard.models import Engine, Host

        cut = (n // 15) % 2 == 1  # box CUT stops reporting for 15 ticks in every 30
        skew = 8.0 if (n // 15) % 2 == 0 and n >= 5 else 0.01
        down = {self.engines[(n // 3) % len(self.engines)].pk} if (n // 3) % 2 == 0 else set()
        now = timezone.now()
        polled = []
        for e in self.engines:
            if cut and e.host.name == box(CUT):
                continue  # its worker is cut off: nobody polls it
            up = e.pk not in down
            status = "up" if up else "down"
            if status != e.status:
                e.status, e.status_changed_at = status, now
            e.status_reason = "" if up else "connection refused"
            e.latest, e.last_poll_at = reading(n, up), now
            polled.append((e, e.latest))
        Engine.objects.bulk_update(
            [e for e, _ in polled], ["status", "status_reason", "status_changed_at", "latest", "last_poll_at"]
        )
        if n % max(1, round(flush_interval() / TICK_S)) == 0:
            for h in self.hosts:
                if not (cut and h.name == box(CUT)):
                    offset = skew if h.name == box(SKEWED) else 0.01
                    Host.objects.filter(pk=h.pk).update(last_report_at=Now(), latest={"clock_offset_s": offset})
        self.live.engines_polled(polled)
        for h in self.hosts:
            if not (cut and h.name == box(CUT)):
                self.live.host_polled(h, {"host": {}, "gpus": [], "processes": {}})
        cpu = time.thread_time()
        self.watch.tick()
        self.watch_cpu.append(time.thread_time() - cpu)


def box(n: int) -> str:
    from tests.fleetgrid import box_name

    return box_name(n)


def flush_interval() -> float:
    from django.conf import settings

    return float(settings.SPARKOPS_FLUSH_INTERVAL) or TICK_S


def open_page(browser, base, user, path):
    """A 1440×900 tab on PATH, logged in as USER; (page, its CDP session, the frame counter)."""
    from django.conf import settings

    from tests.live.helpers import session_key

    context = browser.new_context(viewport={"width": 1440, "height": 900})
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session_key(user), "url": base}])
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Performance.enable")
    frames = {"n": 0, "bytes": 0}

    def received(event):
        frames["n"] += 1
        frames["bytes"] += len(event["response"]["payloadData"].encode())

    cdp.on("Network.webSocketFrameReceived", received)
    page.goto(base + path)
    return page, cdp, frames


def perf(cdp) -> dict[str, float]:
    return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}


def measure(browser, base, user, path, server, seconds):
    """The figures of SECONDS with PATH open, after 6 s to settle (the watch's first full send)."""
    page, cdp, frames = open_page(browser, base, user, path)
    page.wait_for_timeout(6000)
    cpu0, perf0, n0, b0, t0 = server.cpu_times(), perf(cdp), frames["n"], frames["bytes"], time.monotonic()
    dropped0 = DROPPED.n
    page.wait_for_timeout(seconds * 1000)  # Playwright delivers the CDP events while it waits
    cpu1, perf1, wall = server.cpu_times(), perf(cdp), time.monotonic() - t0
    result = {
        "server_cpu": (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / wall,
        "ws_bytes": (frames["bytes"] - b0) / wall,
        "ws_frames": (frames["n"] - n0) / wall,
        "script": (perf1["ScriptDuration"] - perf0["ScriptDuration"]) / wall,
        "task": (perf1["TaskDuration"] - perf0["TaskDuration"]) / wall,
        "layout": (perf1["LayoutDuration"] + perf1["RecalcStyleDuration"])
        - (perf0["LayoutDuration"] + perf0["RecalcStyleDuration"]),
        "nodes": perf1["Nodes"],
        "dropped": DROPPED.n - dropped0,
        "wall": wall,
    }
    result["layout"] /= wall
    if path == "/hosts/":
        result["applied"] = page.evaluate("window.sparkopsFleet.applied")
        result["fetches"] = page.evaluate("window.sparkopsFleet.fetches")
    page.context.close()
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boxes", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--pages", default="hosts", help="hosts, live, or both: hosts,live")
    args = parser.parse_args()

    import django

    django.setup()
    for name, level in (("channels_redis.core", logging.INFO), ("axes", logging.WARNING)):
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.propagate = False
    logging.getLogger("channels_redis.core").addHandler(DROPPED)
    import psutil
    from django.contrib.auth import get_user_model
    from playwright.sync_api import sync_playwright

    from dashboard.models import Engine
    from sparkops.webproc import start_web, stop_web
    from tests.chromium import ARGS
    from tests.fleetgrid import seed_fleet

    fresh_database()
    seeded = seed_fleet(args.boxes, problems=False)
    engines = list(Engine.objects.select_related("host").filter(pk__in=[e.pk for e in seeded["engines"]]))
    user = get_user_model().objects.create_user("bench-fleet-viewer", password="bench-fleet-password-1")
    chromium = shutil.which("chromium") or shutil.which("chromium-headless-shell")
    if chromium is None:
        raise SystemExit("needs Debian's chromium (apt-get install chromium)")
    web, base = start_web()
    server = psutil.Process(web.pid)
    fleet = Fleet(seeded["hosts"], engines)
    results = {}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=ARGS)
            fleet.start()
            for name in args.pages.split(","):
                path = {"hosts": "/hosts/", "live": "/"}[name]
                results[name] = measure(browser, base, user, path, server, args.seconds)
            browser.close()
    finally:
        fleet.halt.set()
        fleet.join(30)
        stop_web(web)
    report(args, fleet, results)


def report(args, fleet, results):
    load = os.getloadavg()
    n = args.boxes * 3
    print(
        f"fleet overview: {args.boxes} boxes × 3 engines ({n}), every engine's reading every {TICK_S:g} s, "
        f"{fleet.ticks} ticks ({fleet.late} late), load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    for name, r in results.items():
        page = {"hosts": "/hosts/ (the grid)", "live": "/ (the Live overview, for comparison)"}[name]
        print(
            f"  {page}: web server {r['server_cpu']:.4f} CPU s/s; WebSocket {r['ws_bytes']:.0f} B/s in "
            f"{r['ws_frames']:.2f} frames/s; page JS {r['script'] * 1000:.1f} ms/s, all its tasks "
            f"{r['task'] * 1000:.1f} ms/s (style + layout {r['layout'] * 1000:.1f} ms/s); {r['nodes']:.0f} DOM nodes; "
            f"{r['dropped']} events dropped over the socket's channel capacity"
            + (f"; {r['applied']} deltas applied, {r['fetches']} grid fetches" if "applied" in r else "")
            + f" (over {r['wall']:.0f} s)"
        )
    cpu = sorted(fleet.watch_cpu)
    if cpu:
        print(
            f"  the leader's watch: {sum(cpu) / len(cpu) * 1000:.1f} ms CPU a tick (p50 {cpu[len(cpu) // 2] * 1000:.1f}, "
            f"max {cpu[-1] * 1000:.1f}); sent {fleet.watch.stats['sent']}, quiet {fleet.watch.stats['quiet']}"
        )


if __name__ == "__main__":
    main()
