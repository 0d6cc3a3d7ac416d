"""A private redis-server for a fresh machine: started on a free loopback port when
REDIS_URL is not set, stopped with its parent. Used by `sparkops up` and `make test`."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

from sparkops.lifeline import die_with_parent
from sparkops.ports import free_port

INSTALL_HINT = "redis-server not found: install it with `sudo apt-get install redis-server` (Debian/Ubuntu)."


def _wait_ready(port: int, proc: "subprocess.Popen[bytes]", timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with status {proc.returncode} while starting")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"redis-server did not answer on port {port} within {timeout:.0f} s")


class PrivateRedis:
    """`with PrivateRedis() as url:` — an unpersisted redis-server bound to 127.0.0.1, on PORT
    (default: a free one; a test restarts a server on the port of the one it stopped)."""

    def __init__(self, binary: str | None = None, port: int | None = None) -> None:
        self.binary = binary or shutil.which("redis-server")
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.url: str | None = None

    def start(self) -> str:
        if not self.binary:
            raise RuntimeError(INSTALL_HINT)
        port = self.port or free_port()
        self._dir = tempfile.mkdtemp(prefix="sparkops-redis-")
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self._dir,
                "--loglevel",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 (it only calls prctl, safe after fork)
        )  # gone with us, even when we are SIGKILLed
        _wait_ready(port, self.proc)
        self.url = f"redis://127.0.0.1:{port}/0"
        return self.url

    def stop(self, timeout: float = 5.0) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(getattr(self, "_dir", ""), ignore_errors=True)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """`python -m sparkops.redisproc CMD...`: run CMD with REDIS_URL set, starting a private Redis if needed."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python -m sparkops.redisproc [--] COMMAND [ARGS...]", file=sys.stderr)
        return 2
    if os.environ.get("REDIS_URL"):
        return subprocess.call(argv)
    try:
        with PrivateRedis() as url:
            return subprocess.call(argv, env={**os.environ, "REDIS_URL": url})
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
