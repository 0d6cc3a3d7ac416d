"""Simulated host facts the supervisor keeps current under the state directory:
PSI files (kernel `psi_show()` format), /proc/meminfo, and the GPU state that the
nvidia-smi stand-in prints. Numbers are a GB10's (DGX Spark): docs/field-notes.md §1, §5, §11."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from .systemd import write_atomic

GIB_KB = 1024 * 1024
GPU_HEALTHY: dict[str, Any] = {
    "index": 0,
    "uuid": "GPU-5e3f6a0c-7d1b-4c2e-9f84-2b1d0c9e7a11",
    "name": "NVIDIA GB10",
    "pstate": "P0",
    "clocks.sm": 2450,
    "clocks.max.sm": 2500,
    "clocks.gr": 2450,
    "clocks.max.gr": 2500,
    "clocks.mem": "[N/A]",
    "utilization.gpu": 96,
    "utilization.memory": "[N/A]",
    "power.draw": 78.45,
    "power.limit": "[N/A]",
    "temperature.gpu": 61,
    "clocks_event_reasons.active": "0x0000000000000000",
    "clocks_event_reasons.supported": "0x00000000000001FF",
    "driver_version": "580.95.05",
    "memory.total": "[N/A]",
    "memory.used": "[N/A]",
    "memory.free": "[N/A]",
    "memory.reserved": "[N/A]",
    "fault": None,
}
# The stuck-low clock (docs/field-notes.md §11): ~800 MHz while P0, ~96 % busy, no throttle reason.
GPU_CLOCK_STUCK_LOW = {"clocks.sm": 802, "clocks.gr": 802, "power.draw": 41.2, "fault": "clock_stuck_low"}
GPU_FAULTS = ("clock_stuck_low", "clear")
HOST_FAULTS = ("memory_pressure", "clear")


class HostState:
    def __init__(self, state_dir: Path, seed: int = 0) -> None:
        self.dir = Path(state_dir)
        (self.dir / "proc" / "pressure").mkdir(parents=True, exist_ok=True)
        self.rng = random.Random(seed)
        self.gpu = dict(GPU_HEALTHY)
        self.host_fault: str | None = None
        self.totals = {"cpu": [0, 0], "memory": [0, 0], "io": [0, 0]}
        self.avgs = {k: {"some": [0.0, 0.0, 0.0], "full": [0.0, 0.0, 0.0]} for k in self.totals}

    def set_gpu_fault(self, fault: str) -> None:
        self.gpu = dict(GPU_HEALTHY)
        if fault == "clock_stuck_low":
            self.gpu.update(GPU_CLOCK_STUCK_LOW)
        self.write_gpu()

    def write_gpu(self) -> None:
        gpu = dict(self.gpu)
        jitter = self.rng.randint(-8, 8) if gpu["fault"] is None else self.rng.randint(-2, 2)
        gpu["clocks.sm"] += jitter
        gpu["clocks.gr"] += jitter
        write_atomic(self.dir / "gpu.json", json.dumps(gpu, indent=1))

    def targets(self, res: str) -> tuple[float, float]:
        """(some, full) percentages the averages drift towards."""
        if res == "memory" and self.host_fault == "memory_pressure":
            return 82.0, 41.0
        return {"cpu": (3.0, 0.0), "memory": (0.0, 0.0), "io": (0.4, 0.2)}[res]

    def tick(self, dt: float) -> None:
        """Advance PSI by dt seconds (exponential averages like the kernel's) and rewrite files."""
        for res in self.totals:
            some, full = self.targets(res)
            for i, (kind, target) in enumerate((("some", some), ("full", full))):
                self.totals[res][i] += int(target / 100 * dt * 1e6)
                for j, window in enumerate((10, 60, 300)):
                    avg = self.avgs[res][kind]
                    avg[j] += (target - avg[j]) * min(1.0, dt / window)
            write_atomic(self.dir / "proc" / "pressure" / res, self.psi_text(res))
        write_atomic(self.dir / "proc" / "meminfo", self.meminfo())
        self.write_gpu()

    def psi_text(self, res: str) -> str:
        lines = []
        for i, kind in enumerate(("some", "full")):
            a10, a60, a300 = self.avgs[res][kind] if not (res == "cpu" and kind == "full") else (0.0, 0.0, 0.0)
            total = self.totals[res][i] if not (res == "cpu" and kind == "full") else 0
            lines.append(f"{kind} avg10={a10:.2f} avg60={a60:.2f} avg300={a300:.2f} total={total}\n")
        return "".join(lines)

    def meminfo(self) -> str:
        total = 119 * GIB_KB + 700 * 1024  # GB10: ~128 GB unified, ~119.7 GiB visible
        pressured = self.host_fault == "memory_pressure"
        avail = int(2.1 * GIB_KB) if pressured else int(71.4 * GIB_KB)
        swap_total = 16 * GIB_KB
        swap_free = int(0.9 * GIB_KB) if pressured else swap_total
        rows = [
            ("MemTotal", total),
            ("MemFree", avail // 3),
            ("MemAvailable", avail),
            ("Buffers", 512 * 1024),
            ("Cached", avail // 2),
            ("SwapCached", 0),
            ("Shmem", 300 * 1024),
            ("SReclaimable", 900 * 1024),
            ("SwapTotal", swap_total),
            ("SwapFree", swap_free),
        ]
        return "".join(f"{k + ':':<16}{v:>8} kB\n" for k, v in rows)
