"""Exit → webhook latency with the engine under a real systemd 252 user manager.

The real `systemd --user` of tests/realsystemd/harness.py (own journald, private mount namespace;
needs root) runs the simulated vLLM engine as a user unit with Restart=on-failure; `sparkops up`
(web, worker, beat) watches it as a `--user-unit` engine, reading the real `systemctl --user` and
the real journal. The engine is killed N times the way vLLM dies after an EngineCore death (the
CUDA error in its journal, then exit 0, which Restart=on-failure does not restart); each dying
process writes its exit time (time.time()) just before it exits, and a webhook receiver on loopback
records each POST's arrival. Between deaths the unit is started again by the real systemctl and
the alert resolves. Printed: each death's exit → webhook time and cause, median and worst (target:
paged within 2 s), and the load average.

    sudo .venv/bin/python bench/real_systemd_page.py [--deaths 10] [--stop-hook-only]

`--stop-hook-only`: the unit runs the stop hook (`ExecStopPost=… -m sparkops.controls.stopped`),
the worker's pidfds are off (SPARKOPS_EXIT_WATCH_PIDFDS=0) and its probe every 10 s (it finds the
engine up again after each start), so each page goes out through the hook's datagram.

Uses REDIS_URL if set (else `sparkops up` starts a private Redis), SQLite under a temp dir
unless BENCH_DATABASE_URL names a PostgreSQL database."""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _alerts_stack import Receiver, Stack
from _realunit import DyingUnit, wait_for, wait_stack

from sparkops.redisproc import free_port


def hooks(receiver, transition):
    return [
        h
        for h in receiver.delivered()
        if h["body"].get("transition") == transition and h["body"].get("rule") == "engine_down"
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deaths", type=int, default=10)
    parser.add_argument("--stop-hook-only", action="store_true", help="page through the ExecStopPost= hook alone")
    args = parser.parse_args()
    box = DyingUnit("bench-real")
    receiver, stack = Receiver(), Stack(web_port=free_port())
    try:
        sock = box.root / "stopped.sock"
        hook = f"ExecStopPost={sys.executable} -m sparkops.controls.stopped --socket {sock} %n\n"
        box.start(hook if args.stop_hook_only else "")
        env = {"SPARKOPS_STOP_SOCKET": str(sock)}
        if args.stop_hook_only:
            env.update(SPARKOPS_EXIT_WATCH_PIDFDS="0", SPARKOPS_LIVENESS_INTERVAL="10")
        box.watched_by(stack, receiver, "bench-hook", **env)
        stack.start_up()
        wait_stack(stack)
        time.sleep(5)  # a few probes more: the prober has seen the engine up
        load_before = os.getloadavg()
        latencies = []
        for n in range(args.deaths):
            exited = box.die(n)
            hit = wait_for(lambda n=n: hooks(receiver, "firing")[n:], 60, f"webhook for death {n + 1}")[0]
            latency = hit["at"] - exited
            latencies.append(latency)
            line = hit["body"].get("message", "")
            print(
                f"death {n + 1:2d}: webhook {latency:+.3f} s after the exit — cause {hit['body'].get('cause')}"
                + (" (with the CUDA line)" if "illegal instruction" in line else ""),
                flush=True,
            )
            box.restart()
            wait_for(lambda n=n: len(hooks(receiver, "resolved")) > n, 60, f"resolve notification {n + 1}")
        load_after = os.getloadavg()
        print(f"\nfirst message: {hooks(receiver, 'firing')[0]['body'].get('message')}")
        print(
            f"deaths: {len(latencies)}  exit → webhook received: median {statistics.median(latencies):.3f} s  "
            f"worst {max(latencies):.3f} s  best {min(latencies):.3f} s  (target: within 2 s)"
        )
        print(
            "load average (1, 5, 15 min): before "
            + " ".join(f"{x:.2f}" for x in load_before)
            + ", after "
            + " ".join(f"{x:.2f}" for x in load_after)
            + f"  ({os.cpu_count()} CPUs)"
        )
    finally:
        stack.stop()
        box.stop()


if __name__ == "__main__":
    main()
