"""A small live stack for the browser tests and bench/live_push.py: simulated engines (real
HTTP servers under the simulator's systemd work-alike), the ASGI app under uvicorn (HTTP +
WebSocket) and the real resident poller (its two threads) in the calling process.

The poller runs in the calling process instead of a Celery worker: the same code polls,
evaluates and publishes, with two fewer processes on a small CI box."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from django.db import connection

from sparkops import webproc
from tests.waiting import serves

ROOT = Path(__file__).resolve().parents[2]
SIM_BIN = ROOT / "simulator" / "bin"


def sim_settings(state_dir):
    """Settings that point the host collectors at the simulator's work-alikes."""
    return {
        "SPARKOPS_SYSTEMCTL": str(SIM_BIN / "sim-systemctl"),
        "SPARKOPS_JOURNALCTL": str(SIM_BIN / "sim-journalctl"),
        "SPARKOPS_NVIDIA_SMI": str(SIM_BIN / "sim-nvidia-smi"),
        "SPARKOPS_GPU_BACKEND": "nvidia-smi",
        "SPARKOPS_PROC_ROOT": str(Path(state_dir) / "proc"),
        "SPARKOPS_HOST_ROOT": str(Path(state_dir) / "root"),
    }


def _wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout} s")


def start_simulator(tmp_path, engines=("vllm:sim-vllm", "llamacpp:sim-llama")):
    state, ports = tmp_path / "sim-state", tmp_path / "engines.json"
    # The simulator's own entry point (`sparkops simulate` without Django's start, a second of a core; the
    # CLI's path is tests/test_stack.py's, through `sparkops up --demo`).
    args = [sys.executable, "-m", "simulator", "--state-dir", str(state), "--ports-file", str(ports)]
    for spec in engines:
        args += ["--engine", spec]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    _wait(lambda: ports.exists() or proc.poll() is not None, 30, "the simulator did not start")
    assert proc.poll() is None, f"the simulator exited with {proc.returncode}"
    specs = [json.loads(line) for line in ports.read_text().splitlines() if line.strip()]
    # The ports are named before the engines listen: a poller started now finds them refusing until
    # they have loaded, and on a loaded box that took two probes, so a "fresh start" paged engine_down.
    # The stack's engines are up when SparkOps starts watching them, as a fresh start's are.
    for spec in specs:
        if spec["kind"] != "openai":  # a plain OpenAI server has no /health
            _wait(lambda url=spec["url"]: serves(url), 30, f"{spec['name']} did not answer /health")
    return proc, state, specs


def start_web(*, db_name, log_path):
    """The product's web server (`sparkops.webproc`, as `sparkops up` runs it) on a free port against
    the test database, with the suite's password hasher (tests/web_settings.py); returns (proc, base URL)."""
    url = f"sqlite:///{db_name}" if connection.vendor == "sqlite" else f"postgres://postgres@127.0.0.1:5432/{db_name}"
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "tests.web_settings"}
    env.pop("SPARKOPS_TEST_DB_NAME", None)
    return webproc.start_web(env=env, log_path=log_path, timeout=30)


stop = webproc.stop_web  # terminate and reap a child (the web server, the simulator)


class Poller:
    """The resident poller of HOST (probes every `liveness_s`, metrics every `poll_s`), storing
    every tick, with `errors` for the tests: what its duties logged as failures."""

    def __init__(self, *, host, engines, liveness_s=1.0, poll_s=2.0):
        from sparkops.poller.resident import ResidentPoller

        self.poller = ResidentPoller(
            host.name, poll_interval=poll_s, liveness_interval=liveness_s, duties={}, flush_interval=0
        )
        self.errors = []

    def start(self):
        self.poller.start()
        return self

    def stop(self):
        self.poller.stop()
        if self.poller.cycles["failed"]:
            self.errors.append(f"{self.poller.cycles['failed']} failed duties (see the log)")
