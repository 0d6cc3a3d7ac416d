"""What `sparkops wait-ready` costs and how close it keeps to its promises, on real processes.

Prints, over N runs each (median and max):

- start: from exec to its first line (the gate asking), and to "ready" against an engine that
  already serves (the simulated vLLM on loopback);
- death: from SIGKILL of $MAINPID (an engine that never serves) to the gate's exit 1 (promise: < 2 s);
- stall: against a socket that accepts and never answers, the gate's exit past its budget
  (promise: at the budget, not twice it);
- owner: the CPU of one socket-owner check (collectors/sockowner.Owners.check: whose is the
  engine's listening socket) with --sockets TCP sockets open on the box (target: <= 5 ms), when
  the engine's own process holds it and when another process does (the whole /proc walked once
  per Owners.name_every checks, counted in); by sock_diag (netlink, what the gate uses) and by the
  /proc/net/tcp{,6} fallback (a kernel that refuses sock_diag);
- poll: for comparison, one HTTP readiness poll of the serving engine on loopback (the gate's own
  readiness.probe: GET /health and /v1/models): the gate's CPU, the engine's CPU, and the wall time.

    .venv/bin/python bench/wait_ready.py [--runs 5] [--budget 3] [--sockets 1000] [--checks 400] [--polls 200]"""

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
            "simulator.engine",
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


def open_sockets(n):
    """N TCP sockets on loopback held by this process: a few listeners, the rest connected pairs."""
    held, listeners = [], []
    for _ in range(10):
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(512)
        listeners.append(ls)
    held += listeners
    while len(held) < n:
        ls = listeners[len(held) % len(listeners)]
        c = socket.create_connection(ls.getsockname())
        s, _ = ls.accept()
        held += [c, s]
    return held


def owner_cpu(port, pid, checks, *, own, netlink=True):
    from sparkops.collectors.sockowner import Owners

    other = None if own else subprocess.Popen(["sleep", "600"])  # a main pid that is not the holder
    owners = Owners(port=port, mainpid=pid if own else other.pid, cgroup=None, whose="the engine's", netlink=netlink)
    verdict = owners.check()
    assert verdict.own is own, verdict
    t0 = time.process_time()
    for _ in range(checks):
        owners.check()
    took = (time.process_time() - t0) / checks * 1000
    if other is not None:
        other.kill()
        other.wait()
    return took


def poll_cost(port, pid, polls):
    """(gate CPU ms, engine CPU ms, wall ms) per readiness poll of the engine at PORT (pid PID)."""
    import psutil

    from sparkops.gate.readiness import probe

    url, engine_proc = f"http://127.0.0.1:{port}", psutil.Process(pid)
    assert probe(url, "vllm", 5.0)[0]
    server0, t0, w0 = sum(engine_proc.cpu_times()[:2]), time.process_time(), time.monotonic()
    for _ in range(polls):
        probe(url, "vllm", 5.0)
    wall, cpu = time.monotonic() - w0, time.process_time() - t0
    server = sum(engine_proc.cpu_times()[:2]) - server0
    return cpu / polls * 1000, server / polls * 1000, wall / polls * 1000


def line(name, values, promise=""):
    print(f"{name:<44} median {statistics.median(values):6.2f} s  max {max(values):6.2f} s  {promise}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--budget", type=float, default=3.0)
    p.add_argument("--sockets", type=int, default=1000)
    p.add_argument("--checks", type=int, default=400)
    p.add_argument("--polls", type=int, default=200)
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
    held = open_sockets(a.sockets)
    port = free_port()
    up = engine(port, 0.2)
    while not serves(port):
        time.sleep(0.05)
    tcp = sum(len(Path(t).read_text().splitlines()) - 1 for t in ("/proc/net/tcp", "/proc/net/tcp6"))
    own_ms = owner_cpu(port, up.pid, a.checks, own=True)
    other_ms = owner_cpu(port, up.pid, a.checks, own=False)
    proc_own_ms = owner_cpu(port, up.pid, a.checks, own=True, netlink=False)
    proc_other_ms = owner_cpu(port, up.pid, a.checks, own=False, netlink=False)
    poll_ms = poll_cost(port, up.pid, a.polls)
    up.kill()
    up.wait()
    for s in held:
        s.close()
    line("exec → first line", first)
    line("exec → exit 0 (engine already serving)", ready)
    line("SIGKILL of $MAINPID → exit 1", death, "(promise: < 2 s)")
    line(f"stalling socket: exit past the {a.budget:g} s budget", stall, "(the old helper: + a request timeout each)")
    procs = sum(1 for p in os.listdir("/proc") if p.isdigit())
    print(
        f"socket-owner check, CPU per check with {tcp} TCP sockets in /proc/net/tcp{{,6}} and {procs} processes: "
        f"{own_ms:.2f} ms when the engine holds its port, {other_ms:.2f} ms when another process does "
        f"(target: <= 5 ms; {a.checks} checks each)"
    )
    print(
        f"the same by the /proc/net/tcp{{,6}} fallback: {proc_own_ms:.2f} ms when the engine holds its port, "
        f"{proc_other_ms:.2f} ms when another process does"
    )
    print(
        f"one HTTP readiness poll of the serving engine (GET /health + /v1/models on loopback), for comparison: "
        f"{poll_ms[0]:.2f} ms of the gate's CPU + {poll_ms[1]:.2f} ms of the engine's, {poll_ms[2]:.2f} ms wall "
        f"({a.polls} polls)"
    )
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
