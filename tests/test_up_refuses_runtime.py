"""`sparkops up` refuses, before it starts anything, a runtime directory another install's live
worker holds (issue 47 item 3). It used to print "SparkOps is up", start its children, and stop
only when its worker child was refused and exited 1.

The real command in its own process, from a shell that set nothing of the stack's; the other
install is a real claim on the directory with a real stop listener, in this test's process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sparkops.controls import runtime
from sparkops.poller.stopsocket import StopListener
from sparkops.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
STACK_VARS = ("REDIS_URL", "DATABASE_URL", "SPARKOPS_TEST_DB_NAME", "SPARKOPS_CHANNEL_PREFIX", "SPARKOPS_STOP_SOCKET")


def test_up_refuses_the_runtime_dir_another_installs_live_worker_holds_and_starts_nothing(tmp_path):
    run, other_var, my_var = tmp_path / "run", tmp_path / "other-var", tmp_path / "my-var"
    sock = str(run / "stopped.sock")
    listener = StopListener(sock, lambda stop: None).start()
    try:
        runtime.runtime_claim(runtime_dir=str(run), stop_socket=sock, var_dir=other_var)
        env = {k: v for k, v in os.environ.items() if k not in STACK_VARS}
        env.update(SPARKOPS_VAR_DIR=str(my_var), SPARKOPS_RUNTIME_DIR=str(run), PYTHONPATH=str(ROOT))
        up = subprocess.run(
            [sys.executable, "-m", "sparkops.cli", "up", "--port", str(free_port())],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        listener.stop()
    assert up.returncode != 0, (up.stdout, up.stderr)
    assert f"refused: the runtime directory {run} belongs to the SparkOps install at {other_var}" in up.stderr, (
        up.stderr
    )
    assert "SPARKOPS_RUNTIME_DIR=" in up.stderr, up.stderr
    assert "SparkOps is up" not in up.stdout and "redis" not in up.stdout, up.stdout  # nothing started
    assert not (my_var / "sparkops.sqlite3").exists() and not (my_var / "stack.json").exists()
    assert not (my_var / runtime.RECORD).exists()  # nothing taken
    assert f'"var_dir": "{other_var}"' in (run / runtime.CLAIM).read_text()
