"""Fault → webhook latency of the whole stack at default settings.

`sparkops up` (web, worker, beat) watches one simulated vLLM engine whose unit has
Restart=on-failure; the engine is killed (exit 0, as vLLM after an EngineCore death) 10
times, brought back between deaths, and the time from the fault to the webhook arriving at
a receiver on loopback is printed: median and p95, first and tenth death.

    .venv/bin/python bench/detection_latency.py [--deaths 10]

Uses REDIS_URL if set (else `sparkops up` starts a private Redis), SQLite under a temp dir
unless BENCH_DATABASE_URL names a PostgreSQL database."""

import argparse
import statistics
import time

from _alerts_stack import Receiver, Stack, percentile


def firing(receiver):
    return [
        h
        for h in receiver.delivered()
        if h["body"].get("transition") == "firing" and h["body"]["rule"] == "engine_down"
    ]


def resolved(receiver):
    return [
        h
        for h in receiver.delivered()
        if h["body"].get("transition") == "resolved" and h["body"]["rule"] == "engine_down"
    ]


def wait_for(predicate, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def one_death(stack, receiver, n):
    t0 = time.time()
    stack.control(f"/_sim/units/{stack.engine['name']}/fault", {"kind": "exit0"})
    if not wait_for(lambda: len(firing(receiver)) > n, 60):
        raise SystemExit(f"death {n + 1}: no webhook within 60 s (see {stack.dir}/up.log)")
    hit = firing(receiver)[n]
    stack.wait_unit(ActiveState="inactive")
    time.sleep(1.0)  # let the alert learn "exited 0, will not restart"
    stack.control(f"/_sim/units/{stack.engine['name']}/start")
    stack.wait_healthy()
    if not wait_for(lambda: len(resolved(receiver)) > n, 30):
        raise SystemExit(f"death {n + 1}: no resolve notification within 30 s")
    return hit["at"] - t0, hit["body"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deaths", type=int, default=10)
    args = parser.parse_args()
    receiver, stack = Receiver(), Stack()
    try:
        stack.start_simulator()
        stack.register(receiver.url)
        stack.start_up()
        stack.wait_healthy()
        time.sleep(8)  # worker and beat up, a few probes and polls done
        latencies = []
        for n in range(args.deaths):
            latency, body = one_death(stack, receiver, n)
            latencies.append(latency)
            print(f"death {n + 1:2d}: webhook after {latency:.3f} s — cause {body['cause']}", flush=True)
        print(f"\nfirst message: {firing(receiver)[0]['body']['message']}")
        print(
            f"deaths: {len(latencies)}  median {statistics.median(latencies):.3f} s  "
            f"p95 {percentile(latencies, 0.95):.3f} s  max {max(latencies):.3f} s  "
            f"first {latencies[0]:.3f} s  last {latencies[-1]:.3f} s"
        )
        keys = [h["key"] for h in receiver.delivered()]
        print(f"webhooks received: {len(keys)}, distinct idempotency keys: {len(set(keys))}")
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
