"""Issue 45, item 4: one install, whichever shell. `sparkops up` without REDIS_URL runs a private
Redis on a free port; a command from another shell, with nothing set, reaches that Redis and the
stack's database, so a sweep's requests are counted as SparkOps's own and judged as nobody's. A
read-only command where no install exists creates nothing and says where it looked."""

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkops.ports import free_port
from tests.test_stack import ADMIN_PASSWORD, _login, _polled_demo_engine, _wait_http

ROOT = Path(__file__).resolve().parent.parent
SWEPT = ("--concurrency", "1,8", "--reps", "3", "--output-tokens", "16")


def _env(var_dir, **extra):
    """A shell that set nothing of the stack's: no REDIS_URL, no DATABASE_URL."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("REDIS_URL", "DATABASE_URL", "SPARKOPS_TEST_DB_NAME", "SPARKOPS_CHANNEL_PREFIX")
    }
    env.update(SPARKOPS_VAR_DIR=str(var_dir), **extra)
    return env


def _sparkops(var_dir, *args, timeout=240):
    """`sparkops ARGS` from another shell (another working directory, the same var dir)."""
    return subprocess.run(
        [sys.executable, "-m", "sparkops.cli", *args],
        env={**_env(var_dir), "PYTHONPATH": str(ROOT)},
        cwd=var_dir.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.stack
def test_a_sweep_from_another_shell_is_counted_by_the_stacks_private_redis(tmp_path):
    var = tmp_path / "var"
    port = free_port()
    env = _env(var, SPARKOPS_ADMIN_PASSWORD=ADMIN_PASSWORD, SPARKOPS_HOST_NAME="one-install")
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "up", "--demo", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_http(base + "/healthz", proc, timeout=90)
        client = _login(base)
        _polled_demo_engine(client, timeout=60, name="demo-vllm")
        record = json.loads((var / "stack.json").read_text())
        assert record["pid"] == proc.pid and not record["REDIS_URL"].endswith(":6379/0"), record
        assert stat.S_IMODE((var / "stack.json").stat().st_mode) == 0o600

        swept = _sparkops(var, "bench", "sweep", "--engine", "demo-vllm", *SWEPT, "--json")
        assert swept.returncode == 0, swept.stderr[-3000:]
        listed = _sparkops(var, "alerts", "list", "--json")  # the stack's own database, from the other shell
        assert listed.returncode == 0, listed.stderr[-2000:]

        # 2 warm-ups + 3 + 24 requests, each ended by its pinned output (finish_reason length): as the
        # operator's they fire truncated_answers (20 requests, 10 %); as SparkOps's own they are excluded.
        contract = _contract_after(client, at_least=29, timeout=60)
        # (the demo's synthetic clients send a few requests of their own: the operator's traffic)
        assert contract["own"]["judged"] is True and contract["own"]["finished"]["length"] >= 29, contract
        assert contract["finished"].get("length", 0) < 3, contract
        alerts = client.get("/api/alerts/", params={"state": "open"}).json()
        assert not [a for a in _rows(alerts) if a.get("rule") == "truncated_answers"], alerts
    except BaseException as exc:
        proc.send_signal(signal.SIGTERM)
        raise AssertionError(f"{exc}\n--- sparkops up said:\n{proc.communicate(timeout=60)[0][-6000:]}") from exc
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output[-3000:]
    assert not (var / "stack.json").exists()
    # No stack now: a command that would send requests says so, and sends nothing.
    refused = _sparkops(var, "bench", "sweep", "--engine", "demo-vllm", *SWEPT)
    assert refused.returncode != 0 and "no SparkOps stack is running for the install at" in refused.stderr


def _rows(answer):
    return answer.get("alerts", answer) if isinstance(answer, dict) else answer


def _contract_after(client, *, at_least, timeout):
    deadline = time.monotonic() + timeout
    contract = {}
    while time.monotonic() < deadline:
        engine = next(e for e in client.get("/api/engines/").json()["engines"] if e["name"] == "demo-vllm")
        contract = (engine.get("latest") or {}).get("contract") or {}
        if ((contract.get("own") or {}).get("excluded") or 0) >= at_least:
            return contract
        time.sleep(0.5)
    raise AssertionError(f"the sweep's requests were not counted as SparkOps's own within {timeout} s: {contract}")


def test_a_read_only_command_where_no_install_is_creates_nothing_and_says_where_it_looked(tmp_path):
    var = tmp_path / "nowhere"
    out = _sparkops(var, "alerts", "list")
    assert out.returncode == 1, out.stderr[-2000:]
    assert f"no SparkOps install here: no database at {var}/sparkops.sqlite3 (the var dir, from SPARKOPS_VAR_DIR)" in (
        out.stderr
    )
    assert "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1
    assert not var.exists()  # no secret_key, no empty sparkops.sqlite3
    helped = _sparkops(var, "alerts", "list", "--help")
    assert helped.returncode == 0 and "--state" in helped.stdout and not var.exists()
    listed = _sparkops(var, "--help")
    assert listed.returncode == 0 and "SparkOps commands:" in listed.stdout and not var.exists()


def test_an_empty_database_is_named_not_a_traceback(tmp_path):
    var = tmp_path / "var"
    var.mkdir()
    (var / "sparkops.sqlite3").touch()  # what the old `alerts list` left behind
    out = _sparkops(var, "engine", "list")
    assert out.returncode == 1
    assert f"the database {var}/sparkops.sqlite3 holds no SparkOps tables: run `sparkops migrate`" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_stack_record_counts_only_while_its_up_holds_the_lock(tmp_path):
    """A SIGKILLed `up` leaves stack.json behind: the free lock says it is stale."""
    import fcntl

    from sparkops import install

    install.stack_record(tmp_path, {"REDIS_URL": "redis://127.0.0.1:1/0", "SECRET": "x"}, pid=os.getpid())
    assert install.stack_values(tmp_path) == {}  # no up.lock at all
    with open(tmp_path / "up.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert install.stack_values(tmp_path) == {"REDIS_URL": "redis://127.0.0.1:1/0"}
    assert install.stack_values(tmp_path) == {}
    install.stack_forget(tmp_path, pid=os.getpid() + 1)  # another up's record is not this one's to remove
    assert (tmp_path / "stack.json").exists()
    install.stack_forget(tmp_path, pid=os.getpid())
    assert not (tmp_path / "stack.json").exists()


def test_a_test_notification_queued_where_no_stack_runs_says_it_waits(tmp_path):
    var = tmp_path / "var"
    migrated = _sparkops(var, "migrate", "-v0")
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    added = _sparkops(var, "channel", "add", "ops", "--webhook", "http://127.0.0.1:9/hook")
    assert added.returncode == 0, added.stderr[-2000:]
    out = _sparkops(var, "alerts", "test-channel", "ops")
    assert out.returncode == 0 and "queued test delivery" in out.stdout, out.stderr[-2000:]
    assert f"no SparkOps stack is running for the install at {var} and REDIS_URL is not set" in out.stderr
    assert "waits in the outbox until its worker runs" in out.stderr
