"""The web server as `sparkops up` runs it (uvicorn on the ASGI application), for whatever else
starts one: the tests' live stacks and shared server, and the benchmarks under bench/.

`web_argv` is the one command line; `start_web` starts it on a free loopback port and returns
once `/livez` answers 200, or raises `WebDidNotStart` with the tail of its log. Django is not
imported here: a bench starts the server before (or without) setting Django up."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from dashboard.http import sync_client
from sparkops.ports import free_port

ROOT = Path(__file__).resolve().parents[1]


class WebDidNotStart(RuntimeError):
    """The server exited, or did not answer /livez in time; the message ends with its log's tail."""


def web_argv(host: str, port: int, *extra: str) -> list[str]:
    """uvicorn serving sparkops.asgi on HOST:PORT, as `sparkops up` starts it (EXTRA appended)."""
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "sparkops.asgi:application",
        "--host",
        host,
        "--port",
        str(port),
        "--no-access-log",
        "--lifespan",
        "off",
        *extra,
    ]


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-2000:]
    except OSError:
        return ""


def start_web(
    *,
    env: dict[str, str] | None = None,
    log_path: str | Path | None = None,
    timeout: float = 60.0,
    cwd: str | Path = ROOT,
) -> tuple[subprocess.Popen[bytes], str]:
    """(process, base URL) of a web server on a free 127.0.0.1 port with ENV (default: this
    process's), its output in LOG_PATH (default: a temporary file), once /livez answers 200."""
    port = free_port()
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix="sparkops-web-", suffix=".log")
        os.close(fd)
        log_path = name
    log = Path(log_path)
    with log.open("w") as out:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            web_argv("127.0.0.1", port),
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise WebDidNotStart(f"uvicorn exited with status {proc.returncode}:\n{_tail(log)}")
        try:
            if sync_client().get(base + "/livez", timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise WebDidNotStart(f"uvicorn did not answer /livez within {timeout:.0f} s:\n{_tail(log)}")


def stop_web(proc: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """Terminate PROC (a start_web process) and reap it; killed if it does not go in TIMEOUT s."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
