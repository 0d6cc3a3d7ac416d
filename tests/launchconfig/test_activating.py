"""The simulated systemd holds a unit in activating/start-post while its readiness helper
(ExecStartPost, a real process) runs, as systemd does; a helper that gives up, or a start past
TimeoutStartSec, fails the start. Read through the simulated `systemctl show`/`cat`."""

import subprocess
import time
from pathlib import Path

import pytest

from dashboard.systemctl_show import unit_props
from simulator.client import Simulation


@pytest.fixture
def sim(tmp_path):
    with Simulation(
        engines=["vllm:nemotron,cold_seconds=5,warm_cache=1"], state_dir=tmp_path / "sim", ready_timeout=30
    ) as s:
        yield s


def systemctl(sim, *args):
    out = subprocess.run(
        [str(sim.bin_dir / "sim-systemctl"), *args],
        env=sim.env(),
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    return out


def show(sim, *props):
    return unit_props(systemctl(sim, "show", "nemotron.service", "-p", ",".join(props)).stdout)


def until(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not (got := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return got


def journal(sim):
    return (sim.state_dir / "journal" / "nemotron.service.jsonl").read_text()


def test_a_cold_start_sits_in_start_post_while_the_helper_runs_then_becomes_active(sim):
    import httpx

    assert show(sim, "ActiveState", "SubState")["ActiveState"] == "active"
    sim.cold("nemotron")
    sim.restart("nemotron")
    props = show(sim, "ActiveState", "SubState", "ControlPID", "MainPID", "ActiveEnterTimestamp")
    assert (props["ActiveState"], props["SubState"]) == ("activating", "start-post")
    assert props["ControlPID"] != "0" and props["MainPID"] != "0"
    # The helper is a real process, told the main PID as systemd tells ExecStartPost.
    cmdline = Path(f"/proc/{props['ControlPID']}/cmdline").read_bytes().split(b"\0")
    assert b"simulator.waitready" in cmdline and str(int(sim.url("nemotron").rsplit(":", 1)[1])).encode() in cmdline
    environ = Path(f"/proc/{props['ControlPID']}/environ").read_bytes().split(b"\0")
    assert f"MAINPID={props['MainPID']}".encode() in environ
    with pytest.raises(httpx.HTTPError):
        httpx.get(sim.url("nemotron") + "/health", timeout=1.0).raise_for_status()  # still loading
    done = until(lambda: (p := show(sim, "ActiveState", "SubState", "ControlPID"))["ActiveState"] != "activating" and p)
    assert (done["ActiveState"], done["SubState"], done["ControlPID"]) == ("active", "running", "0")
    assert httpx.get(sim.url("nemotron") + "/health", timeout=2.0).status_code == 200
    text = journal(sim)
    assert text.rfind("Starting SparkOps simulated vllm engine nemotron...") < text.rfind(
        "Started SparkOps simulated vllm engine nemotron."
    )


def test_a_start_past_timeout_start_sec_fails_with_result_timeout(sim):
    sim.dropin("nemotron", "30-timeout.conf", "[Service]\nTimeoutStartSec=2\nRestart=no\n")
    assert show(sim, "TimeoutStartUSec")["TimeoutStartUSec"] == "2s"
    sim.cold("nemotron")  # it serves after 5 s: a start that outlived TimeoutStartSec would become active
    sim.restart("nemotron")
    failed = until(
        lambda: (p := show(sim, "ActiveState", "Result", "MainPID", "ExecStartPost"))["ActiveState"] == "failed" and p
    )
    assert failed["Result"] == "timeout" and failed["MainPID"] == "0"
    # Ended by the manager at TimeoutStartSec (the helper killed), not by the helper's own 60 s budget (it exits 1).
    assert "code=killed ; status=9/KILL" in failed["ExecStartPost"], failed["ExecStartPost"]
    assert "nemotron.service: start-post operation timed out. Terminating." in journal(sim)
    assert "Failed with result 'timeout'." in journal(sim)


def test_a_helper_that_gives_up_fails_the_start_with_its_exit_code(sim):
    port = int(sim.url("nemotron").rsplit(":", 1)[1])
    helper = "/usr/local/bin/sparkops-wait-ready"
    sim.dropin(
        "nemotron", "30-budget.conf", f"[Service]\nExecStartPost=\nExecStartPost={helper} {port} 1\nRestart=no\n"
    )
    post = show(sim, "ExecStartPost")["ExecStartPost"]
    assert f"argv[]={helper} {port} 1 " in post
    sim.cold("nemotron")  # 5 s of loading against a 1 s budget
    sim.restart("nemotron")
    failed = until(lambda: (p := show(sim, "ActiveState", "Result"))["ActiveState"] == "failed" and p)
    assert failed["Result"] == "exit-code"
    assert "nemotron.service: Control process exited, code=exited, status=1/FAILURE" in journal(sim)
    # Warm, the same helper sees the answer within its budget: active again. (The budget is 10 s now: a
    # warm start answers in well under a second, but a full suite's load once made it miss 1 s.)
    sim.dropin(
        "nemotron", "30-budget.conf", f"[Service]\nExecStartPost=\nExecStartPost={helper} {port} 10\nRestart=no\n"
    )
    sim.start("nemotron")
    assert until(lambda: show(sim, "ActiveState")["ActiveState"] == "active")
