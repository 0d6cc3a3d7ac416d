"""Client CPU per GET through `http.aget`: httpx's default transport (httpcore + anyio)
against `OriginClients` (H11Transport, dashboard/http_h11.py), the path of every engine poll.

One simulated vLLM engine runs in a subprocess, so only the client's CPU is counted: the
thread CPU time (user + system) of sequential GETs of /health (empty body) and /metrics
(~12 kB of Prometheus text) on one keep-alive connection, after a warm-up, best of a few
rounds (the VM's noise only ever adds time). For the share of httpx's Client layer and
`http.aget` that both pay alike, it also times each transport alone
(`handle_async_request` and reading the body, no Client).

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
from dashboard.http_h11 import H11Transport  # noqa: E402

SERVE = """
import asyncio, sys
from dashboard.simulator.fleet import serve_many
async def main():
    fleet = await serve_many(1, "vllm")
    print(fleet.urls[0], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
asyncio.run(main())
"""


async def cpu_per_get(client, url, requests, rounds):
    for _ in range(20):
        await http.aget(client, url, timeout=2)
    best = float("inf")
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(requests):
            await http.aget(client, url, timeout=2)
        best = min(best, (time.thread_time() - start) / requests)
    return best


async def transport_cpu(transport, url, requests, rounds):
    request = httpx.Request("GET", url, headers={"user-agent": http.USER_AGENT},
                            extensions={"timeout": httpx.Timeout(2).as_dict()})

    async def one():
        response = await transport.handle_async_request(request)
        async for _ in response.stream:
            pass
        await response.stream.aclose()

    for _ in range(20):
        await one()
    best = float("inf")
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(requests):
            await one()
        best = min(best, (time.thread_time() - start) / requests)
    await transport.aclose()
    return best


async def measure(base, requests, rounds):
    results = {}
    for path in ("/health", "/metrics"):
        for name, transport in (("default transport alone", httpx.AsyncHTTPTransport()),
                                ("H11Transport alone", H11Transport())):
            results[(name, path)] = await transport_cpu(transport, base + path, requests, rounds)
        async with http.async_client() as default:
            results[("httpx default", path)] = await cpu_per_get(default, base + path, requests, rounds)
        clients = http.OriginClients()
        assert isinstance(clients._for(base)._transport, H11Transport), "an env proxy applies to the engine"
        results[("OriginClients (h11)", path)] = await cpu_per_get(clients, base + path, requests, rounds)
        await clients.aclose()
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, "-c", SERVE], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        base = server.stdout.readline().strip()
        results = asyncio.run(measure(base, args.requests, args.rounds))
    finally:
        server.stdin.close()
        server.wait(10)
    print(json.dumps({"requests": args.requests, "rounds": args.rounds}))
    for path in ("/health", "/metrics"):
        for default, h11 in (("httpx default", "OriginClients (h11)"),
                             ("default transport alone", "H11Transport alone")):
            a, b = results[(default, path)], results[(h11, path)]
            print(f"{path:9} {default:24} {a * 1e3:.3f} ms   {h11:20} {b * 1e3:.3f} ms   ratio {a / b:.1f}x")


if __name__ == "__main__":
    main()
