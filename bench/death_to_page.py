"""Process exit → webhook received, with the box's worker watching the engine's process (issue 28).

The real `systemd --user` of tests/realsystemd/harness.py (own journald, private mount namespace;
needs root) runs the simulated vLLM engine as a user unit (Restart=on-failure); `sparkops up`
(web, worker, beat) watches it as a `--user-unit` engine. The engine dies N times the way vLLM
dies after an EngineCore death (the CUDA line in its journal, then exit 0); the dying process
writes its exit time (time.time()) as the very last thing before it exits, and a webhook receiver
on 127.0.0.1 records each POST's arrival. Between deaths the real systemctl starts the unit again,
the alert resolves, and the bench waits two poll intervals so the worker's next metrics tick has
armed a pidfd on the new main process. A viewer's WebSocket (a logged-in session on the live view's
/ws/live/, as the overview's page opens it) records when the engine's card turns down. Printed:
each death's exit → webhook and exit → card, their medians and worst (targets: webhook median
≤ 100 ms, worst ≤ 250 ms; card ≤ 150 ms; the probe alone: 0.67 / 0.97 s), and the load average.

    sudo .venv/bin/python bench/death_to_page.py [--deaths 20] [--probe-only] [--load 8] [--no-unit]

--load N runs N busy processes beside the stack (8 on 2 cores: the load average the issue's
targets are set at; the bench waits until the 1-minute average is there). --no-unit runs the
engine by hand, with no unit, added with only its URL: the worker watches the process that owns
its port.

--probe-only runs the worker with SPARKOPS_EXIT_WATCH=0: the liveness probe every second alone,
for the before figure on the same machine. Uses REDIS_URL if set (else `sparkops up` starts a
private Redis), SQLite under a temp dir unless BENCH_DATABASE_URL names a PostgreSQL database."""

import argparse
import json
import os
import sqlite3
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _alerts_stack import Receiver, Stack
from _realunit import DyingUnit, HandRun, Load, wait_for, wait_stack

from sparkops.redisproc import free_port


def hooks(receiver, transition, subject):
    """engine_down webhooks of SUBJECT (the box may run other engines: a hand-run one the worker
    finds by its process scan dies when its owner stops it, and pages too)."""
    return [
        h
        for h in receiver.delivered()
        if h["body"].get("transition") == transition
        and h["body"].get("rule") == "engine_down"
        and h["body"].get("subject") == subject
    ]


class CardWatcher:
    """A viewer on the live view: a session logged in through /login/ and the overview's socket.
    `downs(name)`: arrival times (time.time()) of each push of NAME's card that turns it down."""

    def __init__(self, base, username, password):
        with httpx.Client(base_url=base, timeout=10) as client:
            client.get("/login/")
            token = client.cookies["csrftoken"]
            answer = client.post(
                "/login/",
                data={"username": username, "password": password, "csrfmiddlewaretoken": token},
                headers={"Referer": base + "/login/"},
            )
            if "sessionid" not in client.cookies:
                raise SystemExit(f"could not log the bench's viewer in ({answer.status_code})")
            cookie = f"sessionid={client.cookies['sessionid']}"
        ws_url = base.replace("http://", "ws://") + "/ws/live/?groups=overview"
        self.ws = connect(ws_url, additional_headers={"Cookie": cookie, "Origin": base})
        self.frames: list[tuple[float, dict]] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            for message in self.ws:
                self.frames.append((time.time(), json.loads(message)))
        except ConnectionClosed:
            pass

    def downs(self, name):
        return [
            at
            for at, frame in list(self.frames)
            if frame.get("type") == "engine.sample"
            and frame["payload"].get("engine") == name
            and frame["payload"].get("points", {}).get("up") == 0.0
        ]

    def close(self):
        self.ws.close()


def vllm_line():
    """The third figure (a real vLLM's EngineCore killed → paged before its API server exits) needs
    a vLLM CPU build; say so where there is none rather than print nothing."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return (
            "real vLLM EngineCore killed → paged before the API server exits: not measured (no vLLM "
            "installed here); the simulated engine's EngineCore child is watched by the same pidfd code "
            "(tests/alerts/test_exit_watch.py)"
        )
    return "real vLLM installed: run tests/realsystemd with SPARKOPS_REAL_ENGINES=require for its EngineCore figure"


def load():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def parts(stack, exits, subject):
    """Where the time went, from the stack's SQLite database (by its rows' stamps, same clock):
    exit → the engine_down event (detection, the status stored), → its delivery row (the unit
    read and the rules), → sent (the send)."""

    path = stack.dir / "var" / "sparkops.sqlite3"
    if not path.exists():
        return
    rows = sqlite3.connect(path).execute(
        "select e.started_at, d.created_at, d.sent_at from alerts_delivery d join alerts_alertevent e "
        "on e.id = d.event_id where d.transition = 'firing' and e.rule = 'engine_down' and e.subject = ? "
        "order by d.id",
        (subject,),
    )

    def t(stamp):
        return datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp() if stamp else float("nan")

    split = [(t(a) - x, t(b) - t(a), t(c) - t(b)) for x, (a, b, c) in zip(exits, rows, strict=False)]
    for name, i in (("exit → event", 0), ("event → delivery row", 1), ("row → sent", 2)):
        print(f"  {name}: median {statistics.median(s[i] for s in split) * 1000:.1f} ms")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deaths", type=int, default=20)
    parser.add_argument("--probe-only", action="store_true", help="SPARKOPS_EXIT_WATCH=0: the probe alone")
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the stack (8: load 8 on 2 cores)")
    parser.add_argument("--no-unit", action="store_true", help="the engine run by hand, with no unit")
    args = parser.parse_args()
    box = HandRun("d2p") if args.no_unit else DyingUnit("d2p")
    receiver, stack = Receiver(), Stack(web_port=free_port())
    busy = None
    try:
        name = box.name
        box.start()
        box.watched_by(stack, receiver, "d2p-hook", SPARKOPS_EXIT_WATCH="0" if args.probe_only else "1")
        (box.root / "viewer-password").write_text("bench-viewer-password-1")
        stack.run("user", "add", "d2p-viewer", "--role", "viewer", "--password-file", str(box.root / "viewer-password"))
        stack.start_up()
        wait_stack(stack)
        viewer = CardWatcher(f"http://127.0.0.1:{stack.web_port}", "d2p-viewer", "bench-viewer-password-1")
        time.sleep(5)  # a few polls more: the worker has armed its pidfd, the prober seen the engine up
        if args.load:
            busy = Load(args.load)
            # The 1-minute average climbs towards the runnable count with a 60 s time constant.
            wait_for(lambda: os.getloadavg()[0] >= args.load * 0.9, 300, f"load average {args.load}")
        load_before = load()
        latencies, causes, cards = [], [], []
        for n in range(args.deaths):
            exited = box.die(n)
            hit = wait_for(lambda n=n: hooks(receiver, "firing", name)[n:], 60, f"webhook for death {n + 1}")[0]
            latencies.append(hit["at"] - exited)
            causes.append(hit["body"].get("cause"))
            card = wait_for(
                lambda exited=exited: [t for t in viewer.downs(name) if t > exited], 30, f"card down {n + 1}"
            )[0]
            cards.append(card - exited)
            with_line = " (with the CUDA line)" if "illegal instruction" in hit["body"].get("message", "") else ""
            print(
                f"death {n + 1:2d}: webhook {latencies[-1] * 1000:7.1f} ms, card {cards[-1] * 1000:7.1f} ms after "
                f"the exit — cause {causes[-1]}" + with_line,
                flush=True,
            )
            box.restart()
            wait_for(lambda n=n: len(hooks(receiver, "resolved", name)) > n, 60, f"resolve notification {n + 1}")
            # two poll intervals: the next metrics tick arms a pidfd on the new main process (with no
            # unit, the port's new owner is looked for at most every PORT_LOOK_S)
            time.sleep(11 if args.no_unit else 2.5)
        ms = sorted(x * 1000 for x in latencies)
        print(
            f"\n{'probe only (SPARKOPS_EXIT_WATCH=0)' if args.probe_only else 'exit watch (pidfd + journal)'}, "
            f"{'an engine with no unit' if args.no_unit else 'a unit engine'}: "
            f"{len(ms)} deaths, process exit → webhook received: median {statistics.median(ms):.1f} ms, "
            f"worst {ms[-1]:.1f} ms, best {ms[0]:.1f} ms (targets: median ≤ 100 ms, worst ≤ 250 ms); "
            f"causes {sorted(set(causes))}"
        )
        cs = sorted(x * 1000 for x in cards)
        print(
            f"process exit → the live card shows it down: median {statistics.median(cs):.1f} ms, worst {cs[-1]:.1f} ms "
            f"(target ≤ 150 ms)"
        )
        print(f"load average (1, 5, 15 min): before {load_before}, after {load()} ({os.cpu_count()} CPUs)")
        print(vllm_line())
        parts(stack, box.exit_times(), name)
        viewer.close()
    finally:
        if busy is not None:
            busy.stop()
        stack.stop()
        box.stop()


if __name__ == "__main__":
    main()
