"""What `sparkops wait-ready` costs and how close it keeps to its promises, on real processes.

Prints, over N runs each (median and max):

- start: from exec to its first line (the gate asking), and to "ready" against an engine that
  already serves (the simulated vLLM on loopback);
- death: from SIGKILL of $MAINPID (an engine that never serves) to the gate's exit 1 (promise: < 2 s);
- stall: against a socket that accepts and never answers, the gate's exit past its budget
  (promise: at the budget, not twice it).

    .venv/bin/python bench/wait_ready.py [--runs 5] [--budget 3]"""

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPARKOPS = str(Path(sys.executable).parent / "sparkops")


def engine(port, load):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dashboard.simulator.engine",
            "--kind",
            "vllm",
            "--port",
            str(port),
            "--load-seconds",
            str(load),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def gate(url, budget, mainpid=None):
    env = {k: v for k, v in os.environ.items() if k != "MAINPID"}
    if mainpid:
        env["MAINPID"] = str(mainpid)
    return subprocess.Popen(
        [SPARKOPS, "wait-ready", "--url", url, "--kind", "vllm", "--budget", str(budget)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serves(port):

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def line(name, values, promise=""):
    print(f"{name:<44} median {statistics.median(values):6.2f} s  max {max(values):6.2f} s  {promise}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--budget", type=float, default=3.0)
    a = p.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} at the start, {os.cpu_count()} cores, {a.runs} runs each")
    first, ready, death, stall = [], [], [], []
    port = free_port()
    up = engine(port, 0.2)
    while not serves(port):
        time.sleep(0.05)
    for _ in range(a.runs):
        t0 = time.monotonic()
        g = gate(f"http://127.0.0.1:{port}", 60, mainpid=up.pid)
        g.stdout.readline()
        first.append(time.monotonic() - t0)
        assert g.wait(timeout=60) == 0
        ready.append(time.monotonic() - t0)
    up.kill()
    up.wait()
    for _ in range(a.runs):
        port = free_port()
        never = engine(port, 100000)
        g = gate(f"http://127.0.0.1:{port}", 120, mainpid=never.pid)
        g.stdout.readline()
        time.sleep(0.5)  # into its loop, a probe or two under way
        never.send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        assert g.wait(timeout=60) == 1
        death.append(time.monotonic() - t0)
        never.wait()
    for _ in range(a.runs):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        g = gate(f"http://127.0.0.1:{listener.getsockname()[1]}", a.budget)
        g.stdout.readline()
        t0 = time.monotonic()
        assert g.wait(timeout=60) == 1
        stall.append(time.monotonic() - t0 - a.budget)
        listener.close()
    line("exec → first line", first)
    line("exec → exit 0 (engine already serving)", ready)
    line("SIGKILL of $MAINPID → exit 1", death, "(promise: < 2 s)")
    line(f"stalling socket: exit past the {a.budget:g} s budget", stall, "(the old helper: + a request timeout each)")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
