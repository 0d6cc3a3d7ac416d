"""Client CPU per GET through `http.aget` (aiohttp, the path of every engine poll) against
httpx's own async client (httpcore + anyio), the alternative the project measured it with.

One simulated vLLM engine runs in a subprocess, so only the client's CPU is counted: the
thread CPU time (user + system) of sequential GETs of /health (empty body) and /metrics
(~12 kB of Prometheus text) on one keep-alive connection, after a warm-up, best of a few
rounds (the VM's noise only ever adds time).

    .venv/bin/python bench/http_client.py [--requests 500] [--rounds 3]
"""

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")

import httpx  # noqa: E402

from dashboard import http  # noqa: E402

SERVE = """
import asyncio, sys
from simulator.fleet import serve_many
async def main():
    fleet = await serve_many(1, "vllm")
    print(fleet.urls[0], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
asyncio.run(main())
"""


async def cpu_per_get(get, url, requests, rounds):
    for _ in range(20):
        await get(url)
    best = float("inf")
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(requests):
            await get(url)
        best = min(best, (time.thread_time() - start) / requests)
    return best


async def measure(base, requests, rounds):
    results = {}
    for path in ("/health", "/metrics"):
        async with http.async_client(headers=http.POLL_HEADERS) as ours:
            results[("http.aget (aiohttp)", path)] = await cpu_per_get(
                lambda url: http.aget(ours, url, timeout=2), base + path, requests, rounds
            )
        async with httpx.AsyncClient(headers={"accept-encoding": "identity"}) as theirs:
            results[("httpx.AsyncClient", path)] = await cpu_per_get(theirs.get, base + path, requests, rounds)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        base = server.stdout.readline().strip()
        results = asyncio.run(measure(base, args.requests, args.rounds))
    finally:
        server.stdin.close()
        server.wait(10)
    print(json.dumps({"requests": args.requests, "rounds": args.rounds}))
    for path in ("/health", "/metrics"):
        a, b = results[("http.aget (aiohttp)", path)], results[("httpx.AsyncClient", path)]
        print(
            f"{path:9} http.aget (aiohttp) {a * 1e3:.3f} ms   httpx.AsyncClient {b * 1e3:.3f} ms   ratio {b / a:.1f}x"
        )


if __name__ == "__main__":
    main()
