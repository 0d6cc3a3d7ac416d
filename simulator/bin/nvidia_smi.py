"""`nvidia-smi --query-gpu=F1,F2 --format=csv[,noheader][,nounits]` and `-L` over
`<state_dir>/gpu.json`. Field names, aliases, units and the "[N/A]" memory fields of a
unified-memory GB10 follow the driver 580 `--help-query-gpu` naming (docs/engines.md §5.1, §5.3)."""

from __future__ import annotations

import json
import sys

from . import read_text, state_path

REASON_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
}
# query name -> (canonical header name, unit, gpu.json key)
FIELDS = {
    "index": ("index", None, "index"),
    "uuid": ("uuid", None, "uuid"),
    "name": ("name", None, "name"),
    "driver_version": ("driver_version", None, "driver_version"),
    "pstate": ("pstate", None, "pstate"),
    "clocks.current.sm": ("clocks.current.sm", "MHz", "clocks.sm"),
    "clocks.sm": ("clocks.current.sm", "MHz", "clocks.sm"),
    "clocks.max.sm": ("clocks.max.sm", "MHz", "clocks.max.sm"),
    "clocks.current.graphics": ("clocks.current.graphics", "MHz", "clocks.gr"),
    "clocks.gr": ("clocks.current.graphics", "MHz", "clocks.gr"),
    "clocks.max.graphics": ("clocks.max.graphics", "MHz", "clocks.max.gr"),
    "clocks.max.gr": ("clocks.max.graphics", "MHz", "clocks.max.gr"),
    "clocks.current.memory": ("clocks.current.memory", "MHz", "clocks.mem"),
    "clocks.mem": ("clocks.current.memory", "MHz", "clocks.mem"),
    "utilization.gpu": ("utilization.gpu", "%", "utilization.gpu"),
    "utilization.memory": ("utilization.memory", "%", "utilization.memory"),
    "power.draw": ("power.draw", "W", "power.draw"),
    "power.draw.average": ("power.draw.average", "W", "power.draw"),
    "power.draw.instant": ("power.draw.instant", "W", "power.draw"),
    "power.limit": ("power.limit", "W", "power.limit"),
    "enforced.power.limit": ("enforced.power.limit", "W", "power.limit"),
    "temperature.gpu": ("temperature.gpu", None, "temperature.gpu"),
    "memory.total": ("memory.total", "MiB", "memory.total"),
    "memory.used": ("memory.used", "MiB", "memory.used"),
    "memory.free": ("memory.free", "MiB", "memory.free"),
    "memory.reserved": ("memory.reserved", "MiB", "memory.reserved"),
}
for _prefix in ("clocks_event_reasons", "clocks_throttle_reasons"):
    FIELDS[f"{_prefix}.active"] = (f"{_prefix}.active", None, "clocks_event_reasons.active")
    FIELDS[f"{_prefix}.supported"] = (f"{_prefix}.supported", None, "clocks_event_reasons.supported")
    for _flag in REASON_BITS:
        FIELDS[f"{_prefix}.{_flag}"] = (f"{_prefix}.{_flag}", None, f"flag:{_flag}")


def value(gpu: dict, query: str, units: bool) -> str:
    _, unit, key = FIELDS[query]
    if key.startswith("flag:"):
        mask = int(gpu["clocks_event_reasons.active"], 16)
        return "Active" if mask & REASON_BITS[key[5:]] else "Not Active"
    raw = gpu.get(key, "[N/A]")
    if isinstance(raw, str) and raw.startswith("["):
        return raw
    text = f"{raw:.2f}" if isinstance(raw, float) else str(raw)
    return f"{text} {unit}" if units and unit else text


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        gpu = json.loads(read_text(state_path("gpu.json")))
    except (FileNotFoundError, ValueError):
        print(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running."
        )
        return 9
    opts = dict(a.split("=", 1) if "=" in a else (a, "") for a in argv)
    if "-L" in opts or "--list-gpus" in opts:
        print(f"GPU {gpu['index']}: {gpu['name']} (UUID: {gpu['uuid']})")
        return 0
    query = opts.get("--query-gpu")
    if not query:
        print("sim-nvidia-smi supports --query-gpu=... --format=csv[,noheader][,nounits] and -L", file=sys.stderr)
        return 2
    fields = [f.strip() for f in query.split(",") if f.strip()]
    for f in fields:
        if f not in FIELDS:
            print(f'Field "{f}" is not a valid field to query.')
            return 2
    fmt = opts.get("--format", "csv").split(",")
    if fmt[0] != "csv":
        print(f'"{fmt[0]}" is not a valid format.', file=sys.stderr)
        return 2
    units = "nounits" not in fmt
    if "noheader" not in fmt:
        print(", ".join(FIELDS[f][0] + (f" [{FIELDS[f][1]}]" if FIELDS[f][1] and units else "") for f in fields))
    print(", ".join(value(gpu, f, units) for f in fields))
    return 0


if __name__ == "__main__":
    sys.exit(main())
