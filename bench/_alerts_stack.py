"""Shared by bench/detection_latency.py and bench/outbox_outage.py: a webhook receiver on
loopback and the whole SparkOps stack (`sparkops up`) watching one simulated vLLM engine."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from dashboard.systemctl_show import unit_props

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


class Receiver:
    """Records every POST with its arrival time; answers `status` (settable) to each."""

    def __init__(self, port=0):
        self.hits, self.status, self.lock = [], 200, threading.Lock()
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with rec.lock:
                    status = rec.status
                    rec.hits.append(
                        {
                            "at": time.time(),
                            "key": self.headers.get("Idempotency-Key"),
                            "status": status,
                            "body": json.loads(body or b"{}"),
                        }
                    )
                self.send_response(status)
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def delivered(self):
        with self.lock:
            return [h for h in self.hits if h["status"] < 300]


class Stack:
    def __init__(self, engine_spec="vllm:bench-vllm,exit_delay=4.5", web_port=18731):
        self.dir = Path(tempfile.mkdtemp(prefix="sparkops-bench-"))
        self.engine_spec, self.web_port, self.procs = engine_spec, web_port, []
        self.env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SPARKOPS_TEST_DB_NAME")}
        self.env.update(
            SPARKOPS_VAR_DIR=str(self.dir / "var"),
            SPARKOPS_HOST_NAME="bench-box",
            DJANGO_SETTINGS_MODULE="sparkops.settings",
            PYTHONPATH=str(ROOT),
        )
        if os.environ.get("BENCH_DATABASE_URL"):
            self.env["DATABASE_URL"] = os.environ["BENCH_DATABASE_URL"]

    def run(self, *args):
        subprocess.run([PY, "manage.py", *args], cwd=ROOT, env=self.env, check=True, stdout=subprocess.DEVNULL)

    def start_simulator(self):
        state, ports = self.dir / "sim", self.dir / "sim" / "ports.jsonl"
        state.mkdir(parents=True)
        self.procs.append(
            subprocess.Popen(
                [
                    PY,
                    "-m",
                    "simulator",
                    "--engine",
                    self.engine_spec,
                    "--state-dir",
                    str(state),
                    "--ports-file",
                    str(ports),
                ],
                cwd=ROOT,
                env=self.env,
                stdout=subprocess.DEVNULL,
            )
        )
        while not ports.exists():
            time.sleep(0.05)
        self.engine = json.loads(ports.read_text().splitlines()[0])
        bins = ROOT / "simulator" / "bin"
        self.env.update(
            SPARKOPS_SIM_STATE_DIR=str(state),
            SPARKOPS_SYSTEMCTL=str(bins / "sim-systemctl"),
            SPARKOPS_JOURNALCTL=str(bins / "sim-journalctl"),
            SPARKOPS_NVIDIA_SMI=str(bins / "sim-nvidia-smi"),
            SPARKOPS_GPU_BACKEND="nvidia-smi",
            SPARKOPS_PROC_ROOT=str(state / "proc"),
        )
        self.state = state
        return self.engine

    def register(self, hook_url):
        self.run("migrate", "-v", "0")
        self.run(
            "engine",
            "add",
            self.engine["name"],
            "--kind",
            "vllm",
            "--url",
            self.engine["url"],
            "--unit",
            self.engine["unit"],
        )
        self.run("channel", "add", "bench-hook", "--webhook", hook_url, "--secret", "bench-secret")

    def start_up(self):
        log = open(self.dir / "up.log", "w")  # noqa: SIM115 (the child's log: open while it runs)
        self.procs.append(
            subprocess.Popen(
                [PY, "manage.py", "up", "--port", str(self.web_port)],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    def control(self, path, body=None):
        return httpx.post(self.engine["control"] + path, json=body or {}, timeout=10).json()

    def unit_props(self):
        text = (self.state / "units" / f"{self.engine['unit']}.show").read_text()
        return unit_props(text)

    def wait_unit(self, timeout=30, **want):
        deadline = time.time() + timeout
        while time.time() < deadline:
            props = self.unit_props()
            if all(props.get(k) == v for k, v in want.items()):
                return props
            time.sleep(0.05)
        raise TimeoutError(f"unit never reached {want}")

    def wait_healthy(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if httpx.get(self.engine["url"] + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError("engine not healthy")

    def stop(self):
        for proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGINT) if proc.pid == os.getpgid(proc.pid) else proc.send_signal(
                        signal.SIGINT
                    )
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()


def percentile(values, q):
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)
