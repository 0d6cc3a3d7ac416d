"""Outbox under a receiver outage: the webhook receiver is down for 2 minutes while 50 alerts
fire and resolve; after it returns, every transition must arrive exactly once (counted by
Idempotency-Key).

    .venv/bin/python bench/outbox_outage.py [--alerts 50] [--outage 120] [--retry-cap 30]

Runs `sparkops up` (web, worker, beat); retries use the default base (2 s) and a cap of
--retry-cap seconds so the drain after the outage is measured in seconds, not minutes."""

import argparse
import socket
import time

from _alerts_stack import Receiver, Stack

FIRE_AND_RESOLVE = """
from sparkops.alerts.services import external_alert_fire, external_alert_resolve
for i in range({n}):
    external_alert_fire(rule="benchmark_regression", severity="warning", subject=f"outage-{{i}}",
                        message=f"bench regression {{i}}")
for i in range({n}):
    external_alert_resolve(rule="benchmark_regression", subject=f"outage-{{i}}")
"""


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alerts", type=int, default=50)
    parser.add_argument("--outage", type=float, default=120.0)
    parser.add_argument("--retry-cap", type=float, default=30.0)
    args = parser.parse_args()
    port = free_port()
    stack = Stack(web_port=free_port())
    stack.env["SPARKOPS_ALERT_RETRY_CAP_S"] = str(args.retry_cap)
    try:
        stack.run("migrate", "-v", "0")
        stack.run("channel", "add", "outage-hook", "--webhook", f"http://127.0.0.1:{port}/hook", "--secret", "k")
        stack.start_up()
        time.sleep(6)
        t0 = time.time()
        stack.run("shell", "-c", FIRE_AND_RESOLVE.format(n=args.alerts))
        print(
            f"{args.alerts} alerts fired and resolved in {time.time() - t0:.1f} s while the receiver is down",
            flush=True,
        )
        time.sleep(max(0.0, args.outage - (time.time() - t0)))
        receiver = Receiver(port=port)
        back = time.time()
        print(f"receiver back after {back - t0:.0f} s", flush=True)
        want = 2 * args.alerts
        while len({h["key"] for h in receiver.delivered()}) < want and time.time() - back < 600:
            time.sleep(0.2)
        time.sleep(5)  # anything late and duplicated would show up now
        keys = [h["key"] for h in receiver.delivered()]
        drained = max(h["at"] for h in receiver.delivered()) - back if keys else float("nan")
        print(
            f"transitions expected {want}; received {len(keys)}; distinct idempotency keys {len(set(keys))}; "
            f"duplicates {len(keys) - len(set(keys))}; missing {want - len(set(keys))}"
        )
        print(f"drained {drained:.1f} s after the receiver came back (retry cap {args.retry_cap:g} s)")
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
