"""GPUs through NVML (nvidia-ml-py), falling back to `nvidia-smi --query-gpu` CSV.

"Not Supported" fields (unified-memory boxes report it for memory) are None, and a box
without a GPU reads `state: "no_gpu"` — both are states, never errors."""

import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any, TypedDict, TypeVar

from django.conf import settings

from sparkops.collectors import command

REASONS = {  # NVML clocks-event reason bits (pynvml "Clock Event Reasons defines")
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}
QUERY = (
    "index",
    "name",
    "pstate",
    "clocks.sm",
    "clocks.max.sm",
    "utilization.gpu",
    "power.draw",
    "power.limit",
    "temperature.gpu",
    "clocks_event_reasons.active",
    "memory.used",
)
NO_GPU_RECHECK_S = 300.0
T = TypeVar("T")


class GpuState(TypedDict):
    state: str  # ok | no_gpu | error
    reason: str
    backend: str  # nvml | nvidia-smi | none


class Gpu(TypedDict):
    """One GPU as the host reading holds it; None where the driver does not report it."""

    index: int | None
    name: str | None
    pstate: str | None
    sm_clock_mhz: int | None
    sm_clock_max_mhz: int | None
    utilization_pct: float | None
    power_w: float | None
    power_limit_w: float | None
    temperature_c: float | None
    clocks_event_reasons: list[str]
    memory_used_bytes: int | None


_backend: dict[str, Any] = {"name": None, "checked": 0.0, "reason": ""}


def decode_reasons(mask: int) -> list[str]:
    return [name for bit, name in REASONS.items() if mask & bit]


def read_gpus() -> tuple[GpuState, list[Gpu]]:
    """({"state": "ok"|"no_gpu"|"error", "reason": str, "backend": str}, [gpu dicts])."""
    backend = _choose_backend()
    if backend == "nvml":
        return _guard(_read_nvml, "nvml")
    if backend == "nvidia-smi":
        return _guard(_read_smi, "nvidia-smi")
    return {"state": "no_gpu", "reason": _backend["reason"], "backend": "none"}, []


def _guard(fn: Callable[[], list[Gpu]], name: str) -> tuple[GpuState, list[Gpu]]:
    try:
        return {"state": "ok", "reason": "", "backend": name}, fn()
    except GpuError as exc:
        return {"state": "error", "reason": str(exc), "backend": name}, []


class GpuError(Exception):
    pass


def _choose_backend() -> str:
    wanted = settings.SPARKOPS_GPU_BACKEND
    now = time.monotonic()
    if _backend["name"] and (_backend["name"] != "none" or now - _backend["checked"] < NO_GPU_RECHECK_S):
        return _backend["name"]
    name, reason = "none", "SPARKOPS_GPU_BACKEND=none"
    if wanted in ("auto", "nvml"):
        name, reason = _try_nvml()
    if name == "none" and wanted in ("auto", "nvidia-smi"):
        found = shutil.which(settings.SPARKOPS_NVIDIA_SMI)
        name, reason = ("nvidia-smi", "") if found else ("none", f"{reason}; no {settings.SPARKOPS_NVIDIA_SMI} on PATH")
    _backend.update(name=name, checked=now, reason=f"no GPU here ({reason.strip('; ')})" if name == "none" else "")
    return name


def _try_nvml() -> tuple[str, str]:
    try:
        import pynvml

        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() < 1:
            return "none", "NVML sees no device"
        return "nvml", ""
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded: no GPU on this box
        return "none", f"NVML: {exc}"


def _read_nvml() -> list[Gpu]:
    import pynvml

    def field(fn: Callable[..., T], *args: object) -> T | None:
        try:
            return fn(*args)
        except pynvml.NVMLError:  # Not Supported (unified memory), No Permission...: a missing value
            return None

    gpus: list[Gpu] = []
    try:
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as exc:
        raise GpuError(f"NVML: {exc}") from None
    for i in range(count):
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
        except pynvml.NVMLError as exc:  # GPU fallen off the bus, driver reloading
            raise GpuError(f"NVML: GPU {i}: {exc}") from None
        power, limit = field(pynvml.nvmlDeviceGetPowerUsage, h), field(pynvml.nvmlDeviceGetEnforcedPowerLimit, h)
        util, mem = field(pynvml.nvmlDeviceGetUtilizationRates, h), field(pynvml.nvmlDeviceGetMemoryInfo, h)
        pstate, mask = (
            field(pynvml.nvmlDeviceGetPerformanceState, h),
            field(pynvml.nvmlDeviceGetCurrentClocksEventReasons, h),
        )
        gpus.append(
            {
                "index": i,
                "name": field(pynvml.nvmlDeviceGetName, h),
                "sm_clock_mhz": field(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM),
                "sm_clock_max_mhz": field(pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_SM),
                "pstate": f"P{pstate}" if pstate is not None and pstate != 32 else None,
                "utilization_pct": util.gpu if util else None,
                "power_w": power / 1000 if power is not None else None,
                "power_limit_w": limit / 1000 if limit is not None else None,
                "temperature_c": field(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU),
                "clocks_event_reasons": decode_reasons(mask) if mask is not None else [],
                "memory_used_bytes": mem.used if mem and mem.total else None,
            }
        )
    return gpus


def _run_smi(fields: Sequence[str]) -> subprocess.CompletedProcess[str]:
    cmd = [settings.SPARKOPS_NVIDIA_SMI, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    try:
        return command.run(cmd, timeout=5)
    except command.CommandError as exc:
        raise GpuError(str(exc)) from None


def _read_smi() -> list[Gpu]:
    done = _run_smi(QUERY)
    if done.returncode != 0 and "clocks_event_reasons" in (done.stdout + done.stderr):
        # drivers before the rename only know the old "throttle" spelling
        done = _run_smi([q.replace("clocks_event_reasons", "clocks_throttle_reasons") for q in QUERY])
    if done.returncode != 0:
        raise GpuError(f"nvidia-smi exit {done.returncode}: {(done.stderr or done.stdout).strip()[:200]}")
    return [parse_smi_row(line) for line in done.stdout.splitlines() if line.strip()]


def _num(text: str) -> float | None:
    text = text.strip()
    if not text or text.startswith("[") or text.upper() in ("N/A", "NOT SUPPORTED"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _whole(text: str) -> int | None:
    number = _num(text)
    return int(number) if number is not None else None


def parse_smi_row(line: str) -> Gpu:
    cols = [c.strip() for c in line.split(",")]
    if len(cols) != len(QUERY):
        raise GpuError(f"nvidia-smi: expected {len(QUERY)} columns, got {len(cols)}: {line[:120]!r}")
    mask_text = cols[9]
    try:
        mask = int(mask_text, 16)
    except ValueError:
        mask = None
    mem = _num(cols[10])
    return {
        "index": _whole(cols[0]),
        "name": cols[1],
        "pstate": cols[2] if cols[2].startswith("P") else None,
        "sm_clock_mhz": _whole(cols[3]),
        "sm_clock_max_mhz": _whole(cols[4]),
        "utilization_pct": _num(cols[5]),
        "power_w": _num(cols[6]),
        "power_limit_w": _num(cols[7]),
        "temperature_c": _num(cols[8]),
        "clocks_event_reasons": decode_reasons(mask) if mask is not None else [],
        "memory_used_bytes": int(mem * 1024 * 1024) if mem is not None else None,
    }


def reset_backend() -> None:
    _backend.update(name=None, checked=0.0, reason="")
