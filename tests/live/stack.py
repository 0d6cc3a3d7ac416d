"""A small live stack for the browser tests and bench/live_push.py: simulated engines (real
HTTP servers under the simulator's systemd work-alike), the ASGI app under uvicorn (HTTP +
WebSocket) and a poller thread calling the real polling services on the collectors' cadence.

The poller runs in the calling process instead of Celery worker+beat: the same services,
signals and receivers run, with three fewer processes on a small CI box."""
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from django.db import connection

from sparkops.redisproc import free_port

ROOT = Path(__file__).resolve().parents[2]
SIM_BIN = ROOT / "dashboard" / "simulator" / "bin"


def sim_settings(state_dir):
    """Settings that point the host collectors at the simulator's work-alikes."""
    return {"SPARKOPS_SYSTEMCTL": str(SIM_BIN / "sim-systemctl"), "SPARKOPS_JOURNALCTL": str(SIM_BIN / "sim-journalctl"),
            "SPARKOPS_NVIDIA_SMI": str(SIM_BIN / "sim-nvidia-smi"), "SPARKOPS_GPU_BACKEND": "nvidia-smi",
            "SPARKOPS_PROC_ROOT": str(Path(state_dir) / "proc")}


def _wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout} s")


def start_simulator(tmp_path, engines=("vllm:sim-vllm", "llamacpp:sim-llama")):
    state, ports = tmp_path / "sim-state", tmp_path / "engines.json"
    args = [sys.executable, "-m", "sparkops.cli", "simulate", "--state-dir", str(state), "--ports-file", str(ports)]
    for spec in engines:
        args += ["--engine", spec]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    _wait(lambda: ports.exists() or proc.poll() is not None, 30, "the simulator did not start")
    assert proc.poll() is None, f"the simulator exited with {proc.returncode}"
    return proc, state, [json.loads(line) for line in ports.read_text().splitlines() if line.strip()]


def start_web(*, db_name, log_path):
    """uvicorn on a free port against the test database; returns (proc, base URL)."""
    port = free_port()
    url = f"sqlite:///{db_name}" if connection.vendor == "sqlite" else f"postgres://postgres@127.0.0.1:5432/{db_name}"
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "sparkops.settings"}
    env.pop("SPARKOPS_TEST_DB_NAME", None)
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "sparkops.asgi:application", "--host", "127.0.0.1",
                             "--port", str(port), "--no-access-log"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"

    def answers():
        assert proc.poll() is None, f"uvicorn exited: {Path(log_path).read_text()[-2000:]}"
        try:
            return httpx.get(base + "/login/", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    _wait(answers, 30, "uvicorn did not answer")
    return proc, base


def stop(proc):
    if proc and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


class Poller(threading.Thread):
    """Liveness every second, metrics every 2 s, the host every 2 s — like the beat schedule."""

    def __init__(self, *, host, engines, liveness_s=1.0, poll_s=2.0):
        super().__init__(daemon=True)
        self.host, self.engines, self.liveness_s, self.poll_s = host, engines, liveness_s, poll_s
        self.halt, self.errors = threading.Event(), []

    def run(self):
        from dashboard.services import polling

        next_poll = 0.0
        try:
            while not self.halt.is_set():
                started = time.monotonic()
                self._guard(polling.engines_probe, engines=self._fresh())
                if started >= next_poll:
                    self._guard(polling.engines_poll, engines=self._fresh())
                    self._guard(polling.host_poll, host=self.host)
                    next_poll = started + self.poll_s
                self.halt.wait(max(0.0, self.liveness_s - (time.monotonic() - started)))
        finally:
            connection.close()

    def _fresh(self):
        from dashboard.models import Engine

        return list(Engine.objects.filter(pk__in=[e.pk for e in self.engines]))

    def _guard(self, fn, **kwargs):
        try:
            fn(**kwargs)
        except Exception as exc:  # keep polling; the test reads self.errors
            self.errors.append(f"{fn.__name__}: {exc!r}")

    def stop(self):
        self.halt.set()
        self.join(timeout=10)
