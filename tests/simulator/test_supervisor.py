"""The supervisor plays systemd: unit state files, journal, restart policy, CLI stand-ins."""

import json
import subprocess
import time

import httpx
import pytest

from simulator import Simulation

pytestmark = pytest.mark.xdist_group("test_supervisor")  # its module-scoped fixture is built once a run, on one worker


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    engines = [
        "vllm:v,load_seconds=0.2,exit_delay=0.3,restart_sec=0.2",
        {"kind": "llamacpp", "name": "l", "load_seconds": 0.2, "restart_sec": 0.2},
    ]
    with Simulation(engines=engines, state_dir=tmp_path_factory.mktemp("sim")) as s:
        yield s


def run(sim, tool, *args):
    out = subprocess.run(
        [str(sim.bin_dir / tool), *args], env=sim.env(), capture_output=True, text=True, timeout=20, check=False
    )
    return out.returncode, out.stdout


def journal(sim, *args):
    code, out = run(sim, "sim-journalctl", "-o", "json", "--no-pager", *args)
    assert code == 0
    return [json.loads(line) for line in out.splitlines()]


def test_units_listed_and_running(sim):
    units = {u["name"]: u for u in sim.units()}
    assert units["v"]["state"] == "active" and units["v"]["unit"] == "v.service" and units["v"]["pid"] > 0
    code, out = run(sim, "sim-systemctl", "show", "v.service", "-p", "ActiveState,SubState", "-p", "MainPID")
    assert code == 0 and sorted(out.splitlines()) == sorted(
        ["ActiveState=active", "SubState=running", f"MainPID={units['v']['pid']}"]
    )
    code, out = run(sim, "sim-systemctl", "show", "ghost.service", "-p", "LoadState,ActiveState,SubState")
    assert sorted(out.splitlines()) == ["ActiveState=inactive", "LoadState=not-found", "SubState=dead"]


def test_startup_lines_in_journal(sim):
    messages = [e["MESSAGE"] for e in journal(sim, "-u", "v")]
    assert any(
        "GPU KV cache size: 766,464 tokens, Maximum concurrency for 32,768 tokens per request: 23.39x" in m
        for m in messages
    )
    # vLLM's worker line before it (issue 30 §2): the KV memory the pool was sized from
    kv = [i for i, m in enumerate(messages) if "[gpu_worker.py:298] Available KV cache memory: 24.38 GiB" in m]
    pool = [i for i, m in enumerate(messages) if "GPU KV cache size:" in m]
    assert kv and pool and kv[0] < pool[0]


def test_crash_restarts_and_counts(sim):
    before = journal(sim, "-u", "l")[-1]["__CURSOR"]
    sim.fault("l", "crash")
    props = sim.wait_for_unit("l", NRestarts=1, ActiveState="active")
    assert props["SubState"] == "running"
    newer = journal(sim, "-u", "l", "--after-cursor", before)
    assert before not in [e["__CURSOR"] for e in newer]
    msgs = [e["MESSAGE"] for e in newer]
    assert "CUDA error: an illegal instruction was encountered" in msgs
    assert "l.service: Main process exited, code=exited, status=1/FAILURE" in msgs
    assert "l.service: Scheduled restart job, restart counter is at 1." in msgs
    full = journal(sim, "-u", "l")
    after = journal(sim, "-u", "l", "--after-cursor", full[-3]["__CURSOR"])
    assert after[:2] == full[-2:]  # exactly the newer entries (more may have arrived since)
    code, _ = run(sim, "sim-journalctl", "-u", "l", "--after-cursor", "garbage")
    assert code == 1
    sim.wait_ready("l")


def test_field_matches_select_entries_as_journalctls_do(sim):
    """`journalctl _PID=N`: one field's values ORed, fields ANDed, and with the units."""
    lines = journal(sim, "-u", "v")
    pid = next(str(e["_PID"]) for e in lines if e.get("SYSLOG_IDENTIFIER") == "vllm")  # the engine's
    by_pid = journal(sim, f"_PID={pid}")
    later = journal(sim, "-u", "v")  # the engine may have written more since
    mine = [[e["__CURSOR"] for e in got if str(e.get("_PID")) == pid] for got in (lines, later)]
    assert mine[0] and mine[0] == [e["__CURSOR"] for e in by_pid][: len(mine[0])]
    assert [e["__CURSOR"] for e in by_pid] == mine[1][: len(by_pid)]
    assert journal(sim, "-u", "l", f"_PID={pid}") == []  # ANDed: v's engine wrote none of l's lines
    either = journal(sim, f"_PID={pid}", "_PID=1")  # ORed: the engine's lines and the manager's (pid 1)
    assert {str(e["_PID"]) for e in either} == {pid, "1"}
    assert "Started SparkOps simulated llamacpp engine l." in [e["MESSAGE"] for e in either]
    code, _ = run(sim, "sim-journalctl", "pid=3")
    assert code == 1  # journalctl: "Failed to add match 'pid=3': Invalid argument"


def test_exit0_is_not_restarted_under_on_failure(sim):
    sim.fault("v", "exit0")
    props = sim.wait_for_unit("v", ActiveState="inactive")
    # collected, as systemd 252 does a unit left inactive/dead: its runtime state reads as never started
    assert props["Result"] == "success" and props["ExecMainStatus"] == "0" and props["ExecMainCode"] == "0"
    assert props["SubState"] == "dead" and props["MainPID"] == "0" and props["NRestarts"] == "0"
    assert props["ExecMainPID"] == "0" and props["InvocationID"] == props["ActiveEnterTimestamp"] == ""
    msgs = [e["MESSAGE"] for e in journal(sim, "-u", "v")]
    assert msgs[-1] == "v.service: Deactivated successfully."  # the clean exit itself is a debug line: not logged
    with pytest.raises(httpx.ConnectError):
        httpx.get(sim.url("v") + "/health")
    sim.start("v")
    sim.wait_ready("v")
    assert sim.show("v")["ActiveState"] == "active"


def test_gpu_nvidia_smi_csv(sim):
    q = "--query-gpu=name,pstate,clocks.sm,clocks.max.sm,utilization.gpu,clocks_event_reasons.active,memory.used"
    _code, out = run(sim, "sim-nvidia-smi", q, "--format=csv,noheader,nounits")
    name, pstate, sm, smax, util, reasons, mem = out.strip().split(", ")
    assert (name, pstate, util, reasons, mem) == ("NVIDIA GB10", "P0", "96", "0x0000000000000000", "[N/A]")
    assert 2400 <= int(sm) <= 2500 and smax == "2500"
    sim.gpu("clock_stuck_low")
    _, out = run(sim, "sim-nvidia-smi", q, "--format=csv,noheader,nounits")
    assert 790 <= int(out.split(", ")[2]) <= 810
    _, header = run(sim, "sim-nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv")
    assert header.splitlines()[0] == "clocks.current.sm [MHz], power.draw [W]"
    assert run(sim, "sim-nvidia-smi", "--query-gpu=bogus", "--format=csv")[0] == 2
    sim.gpu("clear")


def test_psi_kernel_and_bad_input(sim):
    text = (sim.state_dir / "proc/pressure/memory").read_text().splitlines()
    assert text[0].startswith("some avg10=") and text[1].startswith("full avg10=") and " total=" in text[0]
    sim.kernel("NVRM: Xid (PCI:0000:01:00): 79, pid=1122, GPU has fallen off the bus.")
    k = journal(sim, "-k")
    assert k[-1]["MESSAGE"].startswith("NVRM: Xid") and k[-1]["_TRANSPORT"] == "kernel" and "_PID" not in k[-1]
    r = httpx.post(sim.control + "/_sim/units/v/fault", json={"kind": "nope"})
    assert r.status_code == 400
    assert httpx.post(sim.control + "/_sim/gpu", json={"fault": "melt"}).status_code == 400
    sim.host("memory_pressure")
    assert wait_meminfo(sim, lambda kb: kb < 3 * 2**20)  # the field report's ~2.1 GiB available
    sim.host("clear")
    assert wait_meminfo(sim, lambda kb: kb > 3 * 2**20)


def wait_meminfo(sim, ok, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = dict(line.split(":", 1) for line in (sim.state_dir / "proc/meminfo").read_text().splitlines())
        if ok(int(rows["MemAvailable"].split()[0])):
            return True
        time.sleep(0.05)
    return False


def test_the_first_start_after_boot_is_cold_unless_the_cache_survived(tmp_path):
    """cold_seconds makes the first start after boot cold (the JIT cache is empty); warm_cache=1 says it
    survived the boot, so only a start after POST /_sim/units/NAME/cold is."""
    engines = ["vllm:cold,cold_seconds=30,load_seconds=0.1", "vllm:warm,cold_seconds=30,load_seconds=0.1,warm_cache=1"]
    with Simulation(engines=engines, state_dir=tmp_path / "sim", wait_ready=False) as s:
        s.wait_ready("warm", timeout=15)  # no 30 s of compilers first
        assert s.show("warm")["ActiveState"] == "active"
        assert s.show("cold")["ActiveState"] == "activating"  # 30 s of compilers before it answers
        s.cold("warm")
        s.restart("warm")
        assert s.show("warm")["ActiveState"] == "activating"


def test_a_simulation_that_never_gets_ready_leaves_no_supervisor(tmp_path):
    """An engine that is not ready in time fails the `with` and stops the supervisor it started."""
    sim = Simulation(engines=["vllm:slow,load_seconds=30"], state_dir=tmp_path / "sim", ready_timeout=1.5)
    with pytest.raises(TimeoutError), sim:
        pass
    assert sim.proc is not None and sim.proc.poll() is not None  # stopped, not left running
