"""Python API for tests and scripts: run the supervisor in a subprocess.

with Simulation(engines=["vllm:a,rate=50", {"kind": "llamacpp", "name": "b", "load_seconds": 1}],
                state_dir=tmp_path) as sim:
    sim.url("a"); sim.fault("a", "exit0"); sim.wait_for_unit("a", ActiveState="inactive")
    sim.show("a")["Result"]; sim.gpu("clock_stuck_low"); sim.host("memory_pressure")
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from dashboard.http import sync_client
from dashboard.systemctl_show import unit_props

from .supervisor import REPO_ROOT


def spec_string(engine) -> str:
    if isinstance(engine, str):
        return engine
    engine = dict(engine)
    head = f"{engine.pop('kind')}:{engine.pop('name')}"
    if engine.get("port"):
        head += f":{engine['port']}"
    engine.pop("port", None)
    return ",".join([head] + [f"{k}={v}" for k, v in engine.items()])


class Simulation:
    def __init__(
        self,
        engines=("vllm:demo-vllm", "llamacpp:demo-llama"),
        state_dir=None,
        control_port=0,
        ready_timeout: float = 20.0,
        wait_ready: bool = True,
    ) -> None:
        self.wait = wait_ready  # False: return once the supervisor is up, its engines maybe still loading
        self.specs = [spec_string(e) for e in engines]
        self._tmp = None if state_dir else tempfile.TemporaryDirectory(prefix="sparkops-sim-")
        self.state_dir = Path(state_dir if self._tmp is None else self._tmp.name)
        self.control_port = control_port
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen | None = None
        self.engines: dict[str, dict] = {}
        self.control = ""

    # ---- lifecycle ----------------------------------------------------------------------
    def __enter__(self):
        try:
            self.start_supervisor()
        except BaseException:
            self.stop()  # __exit__ is not called when __enter__ raises: the supervisor would be left running
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start_supervisor(self) -> None:
        ports_file = self.state_dir / "ports.jsonl"
        ports_file.unlink(missing_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "simulator",
            "--state-dir",
            str(self.state_dir),
            "--control-port",
            str(self.control_port),
            "--ports-file",
            str(ports_file),
        ]
        for spec in self.specs:
            cmd += ["--engine", spec]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        }
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + self.ready_timeout
        while not ports_file.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"simulator exited with status {self.proc.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError("simulator did not start")
            time.sleep(0.02)
        for line in ports_file.read_text().splitlines():
            info = json.loads(line)
            self.engines[info["name"]] = info
            self.control = info["control"]
        for name in self.engines if self.wait else ():
            self.wait_ready(name, deadline - time.monotonic())

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._tmp:
            self._tmp.cleanup()

    # ---- engines --------------------------------------------------------------------------
    def url(self, name: str) -> str:
        return self.engines[name]["url"]

    def unit(self, name: str) -> str:
        return self.engines[name]["unit"]

    def wait_ready(self, name: str, timeout: float = 20.0) -> None:
        """Until the engine answers its readiness probe (/health 200, or /v1/models) and its unit
        has left activating (its readiness helper has seen the same answer)."""
        path = "/v1/models" if self.engines[name]["kind"] == "openai" else "/health"
        deadline = time.monotonic() + timeout
        while True:
            try:
                answered = sync_client().get(self.url(name) + path, timeout=1.0).status_code == 200
                if answered and not self._activating(name):
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"engine {name} not ready")
            time.sleep(0.05)

    def _post(self, path: str, body=None) -> dict:
        r = sync_client().post(self.control + path, json=body if body is not None else {}, timeout=10.0)
        r.raise_for_status()
        return r.json()

    def fault(self, name: str, kind: str, **extra: Any) -> dict:
        return self._post(f"/_sim/units/{name}/fault", {"kind": kind, **extra})

    def traffic(self, name: str, count: int, **knobs: Any) -> dict:
        """COUNT finished requests in NAME's metrics and log (knobs: simulator/traffic.py)."""
        return self._post(f"/_sim/units/{name}/traffic", {"count": count, **knobs})

    def start(self, name: str) -> dict:
        return self._post(f"/_sim/units/{name}/start")

    def stop_unit(self, name: str) -> dict:
        return self._post(f"/_sim/units/{name}/stop")

    def restart(self, name: str) -> dict:
        return self._post(f"/_sim/units/{name}/restart")

    def dropin(self, name: str, file_name: str, text: str | None, *, reload: bool = True) -> dict:
        """Write (text None: remove) a drop-in of NAME's unit and daemon-reload: the next start runs
        it. RELOAD False: the file changes on disk only (NeedDaemonReload=yes, starts run the loaded unit)."""
        return self._post(f"/_sim/units/{name}/dropin", {"name": file_name, "text": text, "reload": reload})

    def daemon_reload(self) -> dict:
        return self._post("/_sim/daemon-reload")

    def cold(self, name: str) -> dict:
        """Empty NAME's JIT cache: its next start is a cold one."""
        return self._post(f"/_sim/units/{name}/cold")

    @property
    def root(self) -> Path:
        """The simulator's "/" (unit files, environment files): SPARKOPS_HOST_ROOT for the collectors."""
        return self.state_dir / "root"

    def gpu(self, fault: str) -> dict:
        return self._post("/_sim/gpu", {"fault": fault})

    def host(self, fault: str) -> dict:
        return self._post("/_sim/host", {"fault": fault})

    def kernel(self, message: str, priority: int = 3) -> dict:
        return self._post("/_sim/kernel", {"message": message, "priority": priority})

    def units(self) -> list[dict]:
        return sync_client().get(self.control + "/_sim/units", timeout=5.0).json()

    def _activating(self, name: str) -> bool:
        if not self.engines[name].get("unit"):
            return False
        try:
            return self.show(name).get("ActiveState") == "activating"
        except FileNotFoundError:
            return False

    # ---- state files ------------------------------------------------------------------------
    def show(self, name: str) -> dict:
        return unit_props((self.state_dir / "units" / f"{self.unit(name)}.show").read_text())

    def wait_for_unit(self, name: str, timeout: float = 15.0, **props: Any) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            current = self.show(name)
            if all(current.get(k) == str(v) for k, v in props.items()):
                return current
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: wanted {props}, have { {k: current.get(k) for k in props} }")
            time.sleep(0.05)

    def env(self) -> dict:
        """Environment for the bin/ stand-ins."""
        return {**os.environ, "SPARKOPS_SIM_STATE_DIR": str(self.state_dir)}

    @property
    def bin_dir(self) -> Path:
        return Path(__file__).resolve().parent / "bin"
