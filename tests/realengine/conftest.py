"""A real llama.cpp `llama-server` on 127.0.0.1 with the tiny random model (tests/realengine/build.sh).

The binary and model are found through SPARKOPS_LLAMA_SERVER / SPARKOPS_LLAMA_MODEL, else in the
cache directory build.sh fills. Where neither has them the tests skip, saying how to build them;
CI runs build.sh first, so there they run (SPARKOPS_REAL_ENGINES=require turns a skip into a failure)."""

import hashlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from dashboard.http import sync_client
from sparkops.ports import free_port

HERE = Path(__file__).resolve().parent
N_CTX = 8192  # per slot (the model's trained window): room for a needle haystack of a few thousand tokens
N_SLOTS = 2
ALIAS = "sparkops-tiny-random"


def versions():
    pairs = (line.split("=", 1) for line in (HERE / "versions.env").read_text().splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs if not key.lstrip().startswith("#")}


def cache_dir():
    base = os.environ.get("SPARKOPS_LLAMA_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sparkops", "llama.cpp"
    )
    return Path(base) / versions()["LLAMA_CPP_PYTHON_VERSION"]


def model_path():
    digest = hashlib.sha256((HERE / "make_tiny_gguf.py").read_bytes()).hexdigest()[:12]
    return cache_dir() / f"tiny-{digest}.gguf"


def locate():
    """(server, model) paths, or (None, reason)."""
    server = Path(os.environ.get("SPARKOPS_LLAMA_SERVER") or cache_dir() / "bin" / "llama-server")
    model = Path(os.environ.get("SPARKOPS_LLAMA_MODEL") or model_path())
    missing = [str(p) for p in (server, model) if not p.is_file()]
    if missing:
        return None, (
            f"no real llama.cpp build: {', '.join(missing)} missing — run tests/realengine/build.sh "
            "(about 10 minutes on 2 cores) or set SPARKOPS_LLAMA_SERVER and SPARKOPS_LLAMA_MODEL"
        )
    return (server, model), None


@dataclass
class LlamaServer:
    url: str
    process: subprocess.Popen
    log_path: Path
    model: Path

    def log(self):
        return self.log_path.read_text(errors="replace")


def _wait_healthy(url, proc, log_path, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if sync_client().get(url + "/health", timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"llama-server not healthy within {timeout} s:\n{log_path.read_text()[-3000:]}")


def start_llama_server(server, model, log_path, extra=()):
    """llama-server on a free loopback port, healthy; a port lost to a race is retried on another."""
    for _ in range(3):
        port = free_port()
        cmd = [str(server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "--alias", ALIAS]
        cmd += ["--metrics", "--slots", "-c", str(N_CTX * N_SLOTS), "-np", str(N_SLOTS), "--flash-attn", "on", *extra]
        # One thread: on two shared cores, two threads spin-wait on each other (a token in 3 ms, not 0.1 ms).
        cmd += ["--threads", "1", "--threads-batch", "1"]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        if _wait_healthy(url, proc, log_path, timeout=60):
            return LlamaServer(url=url, process=proc, log_path=log_path, model=Path(model))
        if "bind" not in log_path.read_text(errors="replace").lower():
            break
    raise AssertionError(f"llama-server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")


def stop(proc, timeout=10):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


@pytest.fixture(scope="session")
def llama_build():
    found, reason = locate()
    if found is None:
        if os.environ.get("SPARKOPS_REAL_ENGINES") == "require":
            pytest.fail(reason)
        pytest.skip(reason)
    return found


@pytest.fixture(scope="package")
def llama_server(llama_build, tmp_path_factory):
    """One real llama-server for these tests (--metrics --slots, 2 slots of 8192 tokens), stopped after
    the last of them: later tests that scan the box's processes must not find a hand-run engine."""
    server, model = llama_build
    running = start_llama_server(server, model, tmp_path_factory.mktemp("llama") / "llama-server.log")
    yield running
    stop(running.process)
