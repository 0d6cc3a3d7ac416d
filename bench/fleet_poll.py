"""One worker polls 150 simulated vLLM engines in one cycle: target ≤ 1 s.

The engines (simulator.fleet, one port each) run in a separate process so
their CPU is not charged to the poller. The cycle is the resident poller's `metrics_tick`:
the host's sources, a concurrent fetch of /metrics (and on refresh /v1/models) of every
engine, derive and hold each reading, store (every tick here, or every 10 s as deployed),
evaluate the alert rules, publish to the live view (PostgreSQL or SQLite per DATABASE_URL).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/sparkops_bench .venv/bin/python bench/fleet_poll.py [--engines 150] [--cycles 5]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")

SERVE = """
import sys, json, time
from simulator.fleet import FleetThread
with FleetThread(int(sys.argv[1]), "vllm") as fleet:
    print(json.dumps(fleet.urls), flush=True)
    sys.stdin.read()
"""


def cycles(poller, engines, n, label):
    times, ups = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        readings = [reading for _, reading in poller.metrics_tick(engines=engines).engines]
        times.append(time.perf_counter() - t0)
        ups.append(sum(r["up"] for r in readings))
        time.sleep(max(0.0, 2.0 - times[-1]))  # the 2 s tick
    errors = {r["error"] for r in readings if not r["up"]}
    print(f"{label}: " + ", ".join(f"{t:.3f}" for t in times) + " s")
    print(
        f"  median {statistics.median(times):.3f} s, max {max(times):.3f} s (target ≤ 1 s); engines up: {ups}"
        + (f"; errors: {sorted(errors)[:3]}" if errors else "")
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--engines", type=int, default=150)
    parser.add_argument("--cycles", type=int, default=5)
    args = parser.parse_args()
    import django

    django.setup()
    from _fleet import retire, watch_only
    from django.core.management import call_command
    from django.db import connection

    from dashboard.models import Host
    from sparkops.poller.resident import ResidentPoller

    call_command("migrate", verbosity=0)
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(args.engines)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
        text=True,
    )
    try:
        urls = json.loads(server.stdout.readline())
        host, _ = Host.objects.get_or_create(name="bench-fleet")
        engines = watch_only(host, {f"bench-fleet-{i}": {"kind": "vllm", "url": url} for i, url in enumerate(urls)})
        print(f"database: {connection.vendor}; engines: {len(engines)}; cycles: {args.cycles}")
        for flush_interval, label in ((0, "stored every tick"), (10, "stored every 10 s (the default)")):
            poller = ResidentPoller(host.name, duties={}, flush_interval=flush_interval)
            cycles(poller, engines, args.cycles, f"whole tick, {label}")
            poller.stop()
        retire(engines)
    finally:
        server.stdin.close()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
