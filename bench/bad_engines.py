"""Bad engines beside healthy ones, through the real resident poller: does one stall the rest?

Two healthy simulated vLLM engines and one engine per bad payload kind (a 100,000-label line,
NaN values, a redirect, truncated text, a JSON bomb on /v1/models, invalid UTF-8, a
slowloris body, an endless stream, a hang) are served by a subprocess on 127.0.0.1. This
process runs a `ResidentPoller` (its two threads, storing every 10 s as deployed) for the
given seconds, then prints:

- the healthy engines' poll spacing (the time between two of their answers, which is what
  their samples are stamped with; the target is a p99 ≤ 2.5 s at the 2 s default interval);
- each bad engine's reason, as its card shows it;
- this process's peak RSS (the poller's, with the servers in the other process).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/sparkops_bench REDIS_URL=redis://127.0.0.1:6379/2 \\
        .venv/bin/python bench/bad_engines.py [--seconds 60]
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")

SERVE = r"""
import asyncio, json, sys
from aiohttp import web
from simulator.fleet import serve_many

GOOD = "vllm:num_requests_running{engine=\"0\"} 1.0\n"
MODELS = json.dumps({"object": "list", "data": [{"id": "m", "max_model_len": 4096}]})


def text(body, status=200, **headers):
    async def handler(request):
        return web.Response(body=body if isinstance(body, bytes) else body.encode(), status=status,
                            headers=headers, content_type=None)
    return handler


async def slowloris(request):
    resp = web.StreamResponse(headers={"Content-Length": "100000"})
    await resp.prepare(request)
    for _ in range(10000):
        await resp.write(b"v")
        await asyncio.sleep(0.2)
    return resp


async def endless(request):
    resp = web.StreamResponse()
    await resp.prepare(request)
    chunk = b"vllm:num_requests_running{engine=\"0\"} 1.0\n" * 1000
    while True:
        await resp.write(chunk)


async def hang(request):
    await asyncio.sleep(3600)


KINDS = {
    "huge_labels": {"/metrics": text(GOOD + "vllm:num_requests_running{"
                                     + ",".join(f'l{i}="v"' for i in range(100000)) + "} 1\n")},
    "nan": {"/metrics": text("vllm:num_requests_running{engine=\"0\"} NaN\nvllm:kv_cache_usage_perc{engine=\"0\"} +Inf\n")},
    "redirect": {"/metrics": text("", 302, Location="/login")},
    "truncated": {"/metrics": text(GOOD + "vllm:num_requests_waiting{engi")},
    "json_bomb": {"/v1/models": text("[" * 100000 + "]" * 100000)},
    "invalid_utf8": {"/metrics": text(GOOD.encode() + b"\xff\xfe\n")},
    "slowloris": {"/metrics": slowloris},
    "endless": {"/metrics": endless},
    "hang": {"/metrics": hang, "/health": hang},
}


async def main():
    fleet = await serve_many(2, "vllm", name_prefix="healthy")
    engines = [["vllm", f"healthy-{i}", url] for i, url in enumerate(fleet.urls)]
    runners = []
    for name, routes in KINDS.items():
        app = web.Application()
        for path, handler in {"/health": text(""), "/v1/models": text(MODELS), "/metrics": text(GOOD), **routes}.items():
            app.router.add_get(path, handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        engines.append(["vllm", f"bad-{name}", f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"])
    print(json.dumps(engines), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    os.environ.update({"SPARKOPS_GPU_BACKEND": "none", "LOG_LEVEL": "ERROR"})
    import django

    django.setup()
    from django.core.management import call_command

    from dashboard.models import Engine, Host
    from sparkops.poller import fetch, resident
    from sparkops.poller.pending import PendingWrites

    call_command("migrate", verbosity=0)
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    seen = {}  # engine name -> when its answers came (epoch s: the samples' timestamps)
    original = PendingWrites.add_engine

    def add_engine(self, engine, fetched, states):
        seen.setdefault(engine.name, []).append(fetched.at)
        return original(self, engine, fetched, states)

    PendingWrites.add_engine = add_engine
    ticks = []
    tick = resident.ResidentPoller.metrics_tick

    def timed_tick(self, engines=None):
        started = time.monotonic()
        try:
            return tick(self, engines)
        finally:
            ticks.append(time.monotonic() - started)

    resident.ResidentPoller.metrics_tick = timed_tick
    try:
        specs = json.loads(server.stdout.readline())
        host, _ = Host.objects.get_or_create(name="bench-bad")
        for kind, name, url in specs:
            Engine.objects.update_or_create(
                name=name,
                defaults={
                    "kind": kind,
                    "url": url,
                    "host": host,
                    "retired_at": None,
                    "expected_up": True,
                    "status": "unknown",
                },
            )
        poller = resident.ResidentPoller(host.name, duties={}).start()
        time.sleep(args.seconds)
        poller.stop()
        print(json.dumps({"seconds": args.seconds, "interval_s": poller.poll_interval, "cycles": poller.cycles}))
        for name in sorted(n for _, n, _ in specs if n.startswith("healthy")):
            gaps = sorted(b - a for a, b in zip(seen.get(name, []), seen.get(name, [])[1:]))
            if not gaps:
                print(f"{name}: no two readings")
                continue
            p99 = gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))]
            print(
                f"{name}: {len(gaps) + 1} readings, spacing median {statistics.median(gaps):.2f} s, "
                f"p99 {p99:.2f} s, max {gaps[-1]:.2f} s (target p99 ≤ 2.5 s)"
            )
        print(
            f"metrics tick: median {statistics.median(ticks):.2f} s, max {max(ticks):.2f} s (it waits "
            f"{resident.FETCH_WAIT * poller.poll_interval:.2f} s for its engines; the slower ones, bounded by "
            f"the {fetch.poll_timeout():.2f} s poll timeout, are read at a later tick)"
        )
        print(f"load average over the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        for engine in Engine.objects.filter(name__startswith="bad-").order_by("name"):
            print(f"{engine.name:18} {engine.status:8} {engine.status_reason}")
        print(f"poller process peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
        Engine.objects.filter(host=host).update(retired_at=django.utils.timezone.now())
    finally:
        PendingWrites.add_engine = original
        resident.ResidentPoller.metrics_tick = tick
        server.stdin.close()
        server.wait(10)


if __name__ == "__main__":
    main()
