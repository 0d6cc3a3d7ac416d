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

`--stop-hook-only`: the unit runs the stop hook (`ExecStopPost=… -m dashboard.controls.stopped`),
the worker's pidfds are off (SPARKOPS_EXIT_WATCH_PIDFDS=0) and its probe every 10 s (it finds the
engine up again after each start), so each page goes out through the hook's datagram.

Uses REDIS_URL if set (else `sparkops up` starts a private Redis), SQLite under a temp dir
unless BENCH_DATABASE_URL names a PostgreSQL database."""

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _alerts_stack import PY, ROOT, Receiver, Stack

from sparkops.redisproc import free_port
from tests.realsystemd.harness import UserManager, unavailable

# The engine's main process: the simulator's vLLM engine in this process; when it ends (the exit0
# fault: status 0), the time goes to EXITS, then the process exits with the engine's status.
DYING = """import sys, time
sys.path.insert(0, {root!r})
from dashboard.simulator.engine import main
code = main(sys.argv[2:])
with open(sys.argv[1], "a") as fh:
    fh.write(f"{{time.time():.6f}}\\n")
sys.exit(code)
"""


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.005)
    raise SystemExit(f"no {what} within {timeout} s")


def hooks(receiver, transition):
    return [
        h
        for h in receiver.delivered()
        if h["body"].get("transition") == transition and h["body"].get("rule") == "engine_down"
    ]


def healthy(url):
    try:
        return httpx.get(url + "/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deaths", type=int, default=10)
    parser.add_argument("--stop-hook-only", action="store_true", help="page through the ExecStopPost= hook alone")
    args = parser.parse_args()
    reason = unavailable()
    if reason:
        raise SystemExit(f"cannot run a real systemd user manager here: {reason}")
    root = Path(tempfile.mkdtemp(prefix="sdu-bench-"))  # short: the manager's socket path
    manager = UserManager(root, tag=f"bench_{os.getpid()}_{uuid.uuid4().hex[:6]}").start()
    print(f"real systemd user manager up in {manager.started_in_s:.2f} s", flush=True)
    receiver, stack = Receiver(), Stack(web_port=free_port())
    try:
        exits, script, port = root / "exits.log", root / "dying_engine.py", free_port()
        script.write_text(DYING.format(root=str(ROOT)))
        name, unit = "bench-real", f"bench-real-{uuid.uuid4().hex[:6]}.service"
        url = f"http://127.0.0.1:{port}"
        sock = root / "stopped.sock"
        hook = f"ExecStopPost={PY} -m dashboard.controls.stopped --socket {sock} %n\n" if args.stop_hook_only else ""
        manager.write_unit(
            unit,
            f"[Unit]\nDescription=simulated vLLM engine {name}\n"
            f"[Service]\nWorkingDirectory={ROOT}\nEnvironment=PYTHONUNBUFFERED=1 PYTHONPATH={ROOT}\n"
            f"ExecStart={PY} {script} {exits} --kind vllm --name {name} --port {port} --exit-delay 0.05\n"
            f"Restart=on-failure\n{hook}",
        )
        manager.systemctl("daemon-reload")
        manager.systemctl("start", unit)
        wait_for(lambda: healthy(url), 60, "answer from the engine")
        stack.env.update(
            manager.env,
            SPARKOPS_SYSTEMCTL="systemctl",
            SPARKOPS_JOURNALCTL=str(manager.journalctl_wrapper()),
            SPARKOPS_STOP_SOCKET=str(sock),
        )
        if args.stop_hook_only:
            stack.env.update(SPARKOPS_EXIT_WATCH_PIDFDS="0", SPARKOPS_LIVENESS_INTERVAL="10")
        stack.env.pop("DBUS_SESSION_BUS_ADDRESS", None)
        stack.run("migrate", "-v", "0")
        stack.run("engine", "add", name, "--kind", "vllm", "--url", url, "--unit", unit, "--user-unit")
        stack.run("channel", "add", "bench-hook", "--webhook", receiver.url, "--secret", "bench-secret")
        stack.start_up()
        web = f"http://127.0.0.1:{stack.web_port}/healthz"

        def stack_ok():
            try:
                return httpx.get(web, timeout=2).json().get("status") == "ok"
            except (httpx.HTTPError, ValueError):
                return False

        wait_for(stack_ok, 180, "healthy stack (/healthz: a poll done, the worker reporting)")
        time.sleep(5)  # a few probes more: the prober has seen the engine up
        load_before = os.getloadavg()
        latencies = []
        for n in range(args.deaths):
            httpx.post(url + "/_sim/fault", json={"kind": "exit0"}, timeout=10)
            wait_for(lambda n=n: exits.exists() and len(exits.read_text().split()) > n, 60, f"exit {n + 1}")
            exited = float(exits.read_text().split()[n])
            hit = wait_for(lambda n=n: hooks(receiver, "firing")[n:], 60, f"webhook for death {n + 1}")[0]
            latency = hit["at"] - exited
            latencies.append(latency)
            line = hit["body"].get("message", "")
            print(
                f"death {n + 1:2d}: webhook {latency:+.3f} s after the exit — cause {hit['body'].get('cause')}"
                + (" (with the CUDA line)" if "illegal instruction" in line else ""),
                flush=True,
            )
            wait_for(lambda: manager.show(unit).get("ActiveState") == "inactive", 60, "inactive unit")
            manager.systemctl("start", unit)
            wait_for(lambda: healthy(url), 60, "answer after the start")
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
        manager.stop()


if __name__ == "__main__":
    main()
