"""Host-local sources read for real: PSI and meminfo files under a proc root, the
simulator's systemctl/journalctl/nvidia-smi work-alikes, a fake /proc process tree."""

import os
import shutil
from pathlib import Path

import pytest

from sparkops.collectors import gpu, host, processes, systemd
from sparkops.collectors.hostread import host_read
from tests.collectors.conftest import FIXTURES

BIN = Path(__file__).resolve().parents[2] / "simulator" / "bin"


@pytest.fixture
def proc_root(tmp_path, settings):
    root = tmp_path / "proc"
    (root / "pressure").mkdir(parents=True)
    shutil.copy(FIXTURES / "psi" / "meminfo_gb10_swap_full", root / "meminfo")
    for res, name in (("cpu", "linux-6.1_cpu"), ("memory", "gb10_memory_pressure"), ("io", "linux-6.1_io")):
        shutil.copy(FIXTURES / "psi" / name, root / "pressure" / res)
    settings.SPARKOPS_PROC_ROOT = str(root)
    return root


@pytest.fixture
def sim_state(tmp_path, monkeypatch, settings):
    state = tmp_path / "sim"
    (state / "units").mkdir(parents=True)
    (state / "journal").mkdir()
    monkeypatch.setenv("SPARKOPS_SIM_STATE_DIR", str(state))
    settings.SPARKOPS_SYSTEMCTL = str(BIN / "sim-systemctl")
    settings.SPARKOPS_JOURNALCTL = str(BIN / "sim-journalctl")
    settings.SPARKOPS_NVIDIA_SMI = str(BIN / "sim-nvidia-smi")
    return state


def test_memory_and_psi_from_proc_root(proc_root):
    mem = host.read_memory()
    assert mem["mem_available_bytes"] == 2202010 * 1024
    assert mem["swap_used_bytes"] == (16777212 - 943712) * 1024
    psi, reason = host.read_psi()
    assert reason == "" and psi["memory"]["some"]["avg300"] == 82.0 and psi["memory"]["full"]["total"] == 61000000


def test_psi_absent_is_a_state_and_old_kernel_cpu_has_only_some(proc_root):
    shutil.rmtree(proc_root / "pressure")
    psi, reason = host.read_psi()
    assert psi is None and "absent" in reason
    (proc_root / "pressure").mkdir()
    shutil.copy(FIXTURES / "psi" / "linux-5.10_cpu_some_only", proc_root / "pressure" / "cpu")
    psi, reason = host.read_psi()
    assert psi == {"cpu": {"some": {"avg10": 1.5, "avg60": 0.8, "avg300": 0.2, "total": 123456}}}
    assert "memory: absent" in reason


def test_psi_stall_rate_from_total_counter():
    before = {"t": 100.0, "totals": {"memory.some": 1_000_000}}
    rates, _ = host.psi_stall_rates({"memory": {"some": {"total": 1_500_000}}}, before, 102.0)
    assert rates == {"psi.memory.some.stall_pct": 25.0}


def test_systemctl_show_exit0_no_restart_and_missing_unit(sim_state):
    shutil.copy(
        FIXTURES / "systemd" / "252_vllm-main_exit0_no_restart.show", sim_state / "units" / "vllm-main.service.show"
    )
    shutil.copy(FIXTURES / "systemd" / "252_llama-side_running.show", sim_state / "units" / "llama-side.service.show")
    got = systemd.units_show(["vllm-main.service", "llama-side.service", "gone.service"])
    dead = got["vllm-main.service"]
    assert (dead["ActiveState"], dead["SubState"], dead["Result"], dead["ExecMainStatus"], dead["Restart"]) == (
        "inactive",
        "dead",
        "success",
        0,
        "on-failure",
    )
    assert dead["MainPID"] == 0 and dead["ExecMainPID"] == 4123
    assert got["llama-side.service"]["NRestarts"] == 2
    assert got["gone.service"]["LoadState"] == "not-found"


def test_systemctl_missing_or_failing_is_a_reason(settings, tmp_path):
    settings.SPARKOPS_SYSTEMCTL = str(tmp_path / "no-such-systemctl")
    assert systemd.units_show(["a.service"]) == {"a.service": {"error": f"{tmp_path}/no-such-systemctl: not found"}}
    failing = tmp_path / "systemctl"
    failing.write_text("#!/bin/sh\necho 'Failed to connect to bus: No medium found' >&2\nexit 1\n")
    failing.chmod(0o755)
    settings.SPARKOPS_SYSTEMCTL = str(failing)
    assert "Failed to connect to bus" in systemd.units_show(["a.service"])["a.service"]["error"]


def test_journal_cursor_signatures_and_kv_boot_line(sim_state):
    src = (FIXTURES / "journal" / "vllm-0.33_engine_death_exit0.jsonl").read_text().splitlines(keepends=True)
    (sim_state / "journal" / "vllm-main.service.jsonl").write_text("".join(src[:3]))
    shutil.copy(FIXTURES / "journal" / "kernel_xid79_nv_err_no_memory.jsonl", sim_state / "journal" / "kernel.jsonl")
    entries, cursor = systemd.journal_read(units=["vllm-main.service"])
    assert len(entries) == 3
    signature, facts = systemd.classify(entries[0])
    assert signature is None and facts == {"pool_tokens": 766464, "window": 32768, "concurrency": 23.39}
    assert systemd.classify(entries[2])[0] == "cuda_illegal_instruction"
    (sim_state / "journal" / "vllm-main.service.jsonl").write_text("".join(src))
    more, cursor2 = systemd.journal_read(units=["vllm-main.service"], cursor=cursor)
    assert next(systemd.message(e) for e in more).endswith("EngineCore encountered a fatal error.")
    assert len(more) == 3 and cursor2 != cursor
    kernel, _ = systemd.journal_read(kernel=True)
    assert [systemd.classify(e)[0] for e in kernel] == ["xid", "nv_err_no_memory", None]


def test_nvidia_smi_fallback_gb10_unified_memory(sim_state, settings):
    settings.SPARKOPS_GPU_BACKEND = "nvidia-smi"
    gpu.reset_backend()
    shutil.copy(FIXTURES / "nvidia_smi" / "580_gb10_stuck_low_clock_unified_memory.json", sim_state / "gpu.json")
    state, gpus = gpu.read_gpus()
    assert state["state"] == "ok" and state["backend"] == "nvidia-smi"
    g = gpus[0]
    assert (g["name"], g["sm_clock_mhz"], g["sm_clock_max_mhz"], g["pstate"], g["utilization_pct"]) == (
        "NVIDIA GB10",
        806,
        2418,
        "P0",
        96.0,
    )
    assert g["memory_used_bytes"] is None and g["power_limit_w"] is None and g["clocks_event_reasons"] == []
    shutil.copy(FIXTURES / "nvidia_smi" / "580_h200_idle_throttled.json", sim_state / "gpu.json")
    _, [h200] = gpu.read_gpus()
    assert h200["clocks_event_reasons"] == ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]
    assert h200["memory_used_bytes"] == 616 * 1024 * 1024
    os.remove(sim_state / "gpu.json")  # driver gone: an error state with nvidia-smi's words
    state, gpus = gpu.read_gpus()
    assert state["state"] == "error" and "NVIDIA driver" in state["reason"] and gpus == []
    gpu.reset_backend()


def test_no_gpu_is_a_state(settings, tmp_path):
    settings.SPARKOPS_GPU_BACKEND = "nvidia-smi"
    settings.SPARKOPS_NVIDIA_SMI = str(tmp_path / "absent-nvidia-smi")
    gpu.reset_backend()
    state, gpus = gpu.read_gpus()
    assert state["state"] == "no_gpu" and gpus == []
    gpu.reset_backend()


def test_nvidia_smi_garbage_or_unrunnable_is_an_error_state(settings, tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_bytes(b"#!/bin/sh\nprintf '\\377\\376 not csv\\n'\n")  # invalid UTF-8, wrong column count
    smi.chmod(0o755)
    settings.SPARKOPS_GPU_BACKEND = "nvidia-smi"
    settings.SPARKOPS_NVIDIA_SMI = str(smi)
    gpu.reset_backend()
    state, gpus = gpu.read_gpus()
    assert state["state"] == "error" and "expected 11 columns" in state["reason"] and gpus == []
    smi.chmod(0o644)  # the backend was chosen while it ran; now it cannot be executed
    state, gpus = gpu.read_gpus()
    assert state["state"] == "error" and "Permission denied" in state["reason"] and gpus == []
    gpu.reset_backend()


def _proc(root, pid, name, ppid, rss_pages, cgroup="0::/system.slice/vllm-main.service\n"):
    d = root / str(pid)
    d.mkdir()
    fields = ["S", str(ppid)] + ["0"] * 19 + [str(rss_pages)] + ["0"] * 20
    (d / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")
    (d / "cgroup").write_text(cgroup)


def test_compile_storm_counts_compilers_and_their_spawner(proc_root):
    _proc(proc_root, 100, "python3", 1, 1000)
    _proc(proc_root, 200, "ninja", 100, 500)
    for pid in (301, 302, 303):
        _proc(proc_root, pid, "cicc", 200, 1000)
    _proc(proc_root, 400, "bash", 1, 10, cgroup="0::/user.slice/session-1.scope\n")
    got = processes.read_compilers()
    assert got["compilers"] == 4
    assert got["compilers_rss_bytes"] == (500 + 3000) * processes.PAGE
    cicc = [p for p in got["compiler_procs"] if p["name"] == "cicc"]
    assert all(p["parent"] == "python3[100]" and p["unit"] == "vllm-main.service" for p in cicc)


def test_a_quiet_box_is_scanned_for_compilers_less_often_a_busy_one_every_tick(proc_root, settings):
    from sparkops.collectors import hostread

    settings.SPARKOPS_GPU_BACKEND = "none"
    gpu.reset_backend()
    _proc(proc_root, 100, "python3", 1, 1000)
    reading, _, _, state = host_read(engines=[], state={}, now=1000.0)
    assert reading["processes"]["compilers"] == 0
    _proc(proc_root, 200, "cicc", 100, 1000)  # a compile starts
    reading, _, _, state = host_read(engines=[], state=state, now=1000.0 + hostread.IDLE_SCAN_S - 1)
    assert reading["processes"]["compilers"] == 0  # not scanned yet
    reading, _, _, state = host_read(engines=[], state=state, now=1000.0 + hostread.IDLE_SCAN_S)
    assert reading["processes"]["compilers"] == 1
    _proc(proc_root, 201, "cicc", 100, 1000)
    reading, _, _, state = host_read(engines=[], state=state, now=1000.0 + hostread.IDLE_SCAN_S + 2)
    assert reading["processes"]["compilers"] == 2  # compilers seen: every tick scans


def test_host_read_survives_every_source_failing(settings, tmp_path, fleet):
    settings.SPARKOPS_PROC_ROOT = str(tmp_path / "nothing")
    settings.SPARKOPS_SYSTEMCTL = str(tmp_path / "nope")
    settings.SPARKOPS_JOURNALCTL = str(tmp_path / "nope")
    settings.SPARKOPS_GPU_BACKEND = "none"
    gpu.reset_backend()
    reading, _values, infos, _state = host_read(engines=[fleet["vllm"], fleet["llama"]], state={})
    assert reading["host"]["psi"] is None and "absent" in reading["host"]["psi_error"]
    assert reading["host"]["mem_error"] and reading["processes"]["compilers"] is None
    assert "not found" in reading["units"]["vllm-main.service"]["error"]
    assert "not found" in reading["journal_errors"]["units"]
    assert reading["gpu_state"]["state"] == "no_gpu"
    assert infos[fleet["vllm"].pk]["unit"]["error"]
    gpu.reset_backend()


def test_reading_a_fake_proc_root_leaves_psutil_on_the_real_one(settings, tmp_path):
    """The demo's fake /proc must not leak into every other psutil call of the worker."""
    import psutil

    from sparkops.collectors.host import read_memory

    (tmp_path / "meminfo").write_text(
        "MemTotal: 1000 kB\nMemFree: 10 kB\nMemAvailable: 100 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n"
    )
    settings.SPARKOPS_PROC_ROOT = str(tmp_path)
    assert read_memory()["mem_total_bytes"] == 1000 * 1024
    assert psutil.PROCFS_PATH == "/proc" and psutil.pids()


def test_a_rejected_journal_cursor_is_dropped_once_not_forever(sim_state, fleet):
    """journalctl refuses a cursor from a vacuumed journal; the next poll must read again."""
    src = (FIXTURES / "journal" / "vllm-0.33_engine_death_exit0.jsonl").read_text().splitlines(keepends=True)
    (sim_state / "journal" / "vllm-main.service.jsonl").write_text("".join(src[:2]))  # boot lines only
    stale = {"cursor_units": "not-a-cursor-of-this-journal"}
    reading, _, _, state = host_read(engines=[fleet["vllm"]], state=stale)
    assert "cursor was dropped" in reading["journal_errors"]["units"]
    assert state["cursor_units"] != stale["cursor_units"]
    (sim_state / "journal" / "vllm-main.service.jsonl").write_text("".join(src))
    more, _, _, state = host_read(engines=[fleet["vllm"]], state={**state, "journal_t": 0})  # journal due
    assert "units" not in more["journal_errors"]
    # Resumed right after the newest entry: the CUDA line written since is read, once.
    fatal = [line["message"] for line in state["fatal"]["vllm-main.service"]]
    assert len([m for m in fatal if "illegal instruction" in m]) == 1


@pytest.mark.parametrize(
    "message, gib",
    [
        # vLLM 0.9 … 0.11 (logger.info "%.2f GiB"), with the engine core's prefix and ANSI colour
        (
            "\x1b[36m(EngineCore_DP0 pid=4188)\x1b[0m INFO 11-29 06:13:58 [gpu_worker.py:276] "
            "Available KV cache memory: 23.38 GiB",
            23.38,
        ),
        # later builds: format_gib's "%s GiB" and a parenthesis after it
        (
            "(EngineCore pid=4188) INFO 11-29 06:13:58 [gpu_worker.py:563] Available KV cache memory: 88.1 GiB "
            "(process-scoped)",
            88.1,
        ),
    ],
)
def test_vllm_boot_line_gives_the_kv_memory(message, gib):
    """Issue 30 §2: the KV memory of the pool comes from vLLM's own boot line, so each ledger row
    the collector writes carries it and tokens per GiB is learned without a hand entry."""
    signature, facts = systemd.classify({"MESSAGE": message})
    assert signature is None and facts == {"kv_memory_bytes": round(gib * 1024**3)}
