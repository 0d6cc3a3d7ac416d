"""One simulated systemd service: what a unit is asked to be (`UnitSpec`, parsed from an
engine spec `KIND:NAME[:PORT][,key=value...]`) and what it is (`Unit`: the properties
`systemctl show` prints, loaded from its unit files as daemon-reload loads them), with
systemd's restart table (`shall_restart`). The `Supervisor` drives units through their
lifecycle; this module holds no process of its own.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from . import systemd as sd
from . import units as unitfiles
from .core import EngineConfig


class UnitHome(Protocol):
    """What a unit needs of the `Supervisor` that drives it: where its unit files are read from
    (ROOT, the simulator's "/") and where its state files are written (UNITS_DIR). A protocol, so
    this module need not import the supervisor, which imports it."""

    root: Path
    units_dir: Path


RESTART_POLICIES = ("no", "on-success", "on-failure", "on-abnormal", "on-abort", "always")


def _flag(value) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


UNIT_OPTIONS: dict[str, Callable[[str], object]] = {
    "restart": str,
    "restart_sec": float,
    "start_limit_burst": int,
    "start_limit_interval": float,
    "cold_seconds": float,
    "warm_cache": _flag,
    "hand_run": _flag,
}


@dataclass
class UnitSpec:
    kind: str
    name: str
    port: int = 0
    engine_opts: dict = field(default_factory=dict)
    restart: str = "on-failure"
    restart_sec: float = 0.5
    start_limit_burst: int = 5
    start_limit_interval: float = 10.0
    cold_seconds: float = 0.0  # >0: a start on a cold JIT cache takes this much longer and spawns compilers
    warm_cache: bool = False  # the JIT cache survived from before this boot: the first start is warm too
    hand_run: bool = False  # started by hand from a shell: no unit, its argv and environment in /proc

    @classmethod
    def parse(cls, text: str) -> UnitSpec:
        """`KIND:NAME[:PORT][,key=value...]`; keys are unit options or engine options."""
        head, *opts = text.split(",")
        parts = head.split(":")
        if len(parts) not in (2, 3) or not parts[1]:
            raise ValueError(f"engine spec {text!r} is not KIND:NAME[:PORT][,key=value...]")
        spec = cls(parts[0], parts[1], int(parts[2]) if len(parts) == 3 and parts[2] else 0)
        for opt in opts:
            key, sep, value = opt.partition("=")
            if not sep:
                raise ValueError(f"engine option {opt!r} is not key=value")
            spec.set_option(key.strip().replace("-", "_"), value.strip())
        spec.validate()
        return spec

    def set_option(self, key: str, value) -> None:
        if key in UNIT_OPTIONS:
            setattr(self, key, UNIT_OPTIONS[key](value))
        else:
            self.engine_opts[key] = value

    def validate(self) -> None:

        if self.restart not in RESTART_POLICIES:
            raise ValueError(f"Restart= must be one of {', '.join(RESTART_POLICIES)}")
        EngineConfig.from_options({"kind": self.kind, "name": self.name, **self.engine_opts})


def shall_restart(policy: str, result: str, code: str, status: int) -> bool:
    """systemd.service(5) restart table."""
    clean = result == "success"
    return {
        "no": False,
        "always": True,
        "on-success": clean,
        "on-failure": not clean,
        "on-abnormal": code in ("killed", "dumped") and not clean,
        "on-abort": code == "dumped" or (code == "killed" and status not in sd.CLEAN_SIGNALS),
    }[policy]


class Unit:
    def __init__(self, spec: UnitSpec, sup: UnitHome) -> None:
        self.spec, self.sup = spec, sup
        self.id = f"{spec.name}.hand-run" if spec.hand_run else f"{spec.name}.service"
        self.description = f"SparkOps simulated {spec.kind} engine {spec.name}"
        self.proc: asyncio.subprocess.Process | None = None
        self.stop_requested = False
        self.stop_job = "stop"  # the job whose stop half this is: "stop" or "restart" (its Stopped line says)
        self.restart_task: asyncio.Task | None = None
        self.start_times: list[float] = []
        self.p = {
            "Type": "simple",
            "Restart": spec.restart,
            "NotifyAccess": "none",
            "RestartUSec": sd.fmt_timespan(spec.restart_sec),
            "TimeoutStartUSec": "1min 30s",
            "TimeoutStopUSec": "1min 30s",
            **RUNTIME_RESET,  # never started: what a unit left inactive/dead reads
            "MemoryCurrent": "[not set]",
            "Id": self.id,
            "Names": self.id,
            "Description": self.description,
            "LoadState": "loaded",
            "FragmentPath": f"/etc/systemd/system/{self.id}",
            "UnitFileState": "enabled",
            "NeedDaemonReload": "no",
            "StartLimitIntervalUSec": sd.fmt_timespan(spec.start_limit_interval),
            "StartLimitBurst": str(spec.start_limit_burst),
        }
        self.effective: dict = {}
        self.timeout_start = 90.0  # TimeoutStartSec of the loaded unit
        self.control_proc: asyncio.subprocess.Process | None = None  # the ExecStartPost helper while it runs
        self.post_task: asyncio.Task | None = None
        self.fail_result: str | None = None  # why the manager stopped the start ("timeout", "exit-code")
        self.cold_next = not spec.warm_cache  # the first start after boot finds the JIT cache empty
        self.compilers: list[Path] = []
        if spec.hand_run:
            self.effective = unitfiles.hand_run_launch(spec)
        else:
            unitfiles.install(sup.root, spec, spec.restart)
            self.reload()

    def reload(self) -> None:
        """Read the unit's files as systemd's daemon-reload does: the properties `show` prints
        change now, what runs changes at the next start. Until the next reload, a file edited on
        disk makes `systemctl show` say NeedDaemonReload=yes and a start runs the loaded unit."""
        if self.spec.hand_run:
            return
        eff = self.effective = unitfiles.load(self.sup.root, self.id)
        fragment, dropins = unitfiles.paths(self.sup.root, self.id)
        sd.write_atomic(self.sup.units_dir / f"{self.id}.loaded", unitfiles.fingerprint(self.sup.root, self.id))
        self.timeout_start = _span(d_timeout(eff), 90.0)
        d = {k: v["value"] for k, v in eff["directives"].items()}
        spec = self.spec
        spec.restart = d.get("Restart", "no") if d.get("Restart", "no") in RESTART_POLICIES else spec.restart
        spec.restart_sec = _span(d.get("RestartSec"), spec.restart_sec)
        spec.start_limit_burst = int(d.get("StartLimitBurst", spec.start_limit_burst))
        spec.start_limit_interval = _span(d.get("StartLimitIntervalSec"), spec.start_limit_interval)
        start = eff["exec_start"]
        self.p.update(
            {
                "FragmentPath": fragment,
                "DropInPaths": " ".join(dropins),
                "Type": d.get("Type", "simple"),
                "Restart": spec.restart,
                "RestartUSec": sd.fmt_timespan(spec.restart_sec),
                "StartLimitBurst": str(spec.start_limit_burst),
                "StartLimitIntervalUSec": sd.fmt_timespan(spec.start_limit_interval),
                "TimeoutStartUSec": sd.fmt_timespan(_span(d.get("TimeoutStartSec"), 90.0)),
                "ExecStart": _exec_struct(start["argv"]) if start else "",
                "ExecStartPost": " ".join(_exec_struct(c["argv"]) for c in eff["exec_start_post"]),
                "ExecStopPost": " ".join(_exec_struct(c["argv"]) for c in eff["exec_stop_post"]),
                "Environment": " ".join(
                    _quoted(f"{k}={v}")
                    for k, v in eff["environment"].items()
                    if eff["environment_origins"].get(k, "").startswith("/etc/systemd/")
                ),
                "EnvironmentFiles": " ".join(
                    f"{e['path']} (ignore_errors={'yes' if e['optional'] else 'no'})" for e in eff["environment_files"]
                ),
                "After": " ".join(eff["edges"]["After"] + ["sysinit.target", "system.slice", "basic.target"]),
                "Wants": " ".join(eff["edges"]["Wants"]),
                "Requires": " ".join(eff["edges"]["Requires"] + ["system.slice"]),
                "BindsTo": " ".join(eff["edges"]["BindsTo"]),
                "MemoryHigh": _bytes(d.get("MemoryHigh")),
                "MemoryMax": _bytes(d.get("MemoryMax")),
                "CPUQuotaPerSecUSec": _quota(d.get("CPUQuota")),
                "User": d.get("User", ""),
            }
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.spec.port}"

    def set_state(self, active: str, sub: str, *, write: bool = True, **props: Any) -> None:
        """WRITE False: a step systemd takes within one turn of its event loop (dead, then collected
        or auto-restart), which no `systemctl show` can see: the caller writes the state it ends in."""
        now = sd.fmt_timestamp(time.time())
        old = self.p["ActiveState"]
        if old != active:
            if active == "active":
                self.p["ActiveEnterTimestamp"] = now
            if old == "active":
                self.p["ActiveExitTimestamp"] = now
            if active in ("inactive", "failed"):
                self.p["InactiveEnterTimestamp"] = now
            if old in ("inactive", "failed"):
                self.p["InactiveExitTimestamp"] = now
            self.p["StateChangeTimestamp"] = now
        self.p.update(ActiveState=active, SubState=sub, **{k: str(v) for k, v in props.items()})
        if write:
            self.write()

    def collect(self) -> None:
        """systemd's garbage collection of a unit left inactive/dead with no job pending (CollectMode=
        inactive): it is unloaded, and the next `systemctl show` loads it afresh from its files, so
        every runtime property reads as never started (real systemd 252: ExecMain* 0 or empty, no
        timestamps, InvocationID and ControlGroup empty, NRestarts 0, Result success). A failed unit
        is kept until `systemctl reset-failed`."""
        self.p.update(RUNTIME_RESET)
        self.write()

    def write(self) -> None:
        if self.spec.hand_run:  # no unit: systemd knows nothing of it
            return
        text = "".join(f"{k}={self.p[k]}\n" for k in sd.SHOW_KEYS)
        sd.write_atomic(self.sup.units_dir / f"{self.id}.show", text)

    def command(self) -> list[str]:
        """The simulated engine, with the options the unit's effective ExecStart gives it."""
        cmd = [
            sys.executable,
            "-m",
            "simulator.engine",
            "--kind",
            self.spec.kind,
            "--name",
            self.spec.name,
            "--port",
            str(self.spec.port),
        ]
        opts = unitfiles.engine_options(self.spec.kind, self.effective, self.spec.engine_opts)
        if self.cold_next and self.spec.cold_seconds > 0:
            opts["load_seconds"] = float(opts.get("load_seconds", 0.5)) + self.spec.cold_seconds
        for key, value in opts.items():
            cmd += [f"--{key.replace('_', '-')}", str(value)]
        return cmd

    def info(self) -> dict:
        return {
            "name": self.spec.name,
            "kind": self.spec.kind,
            "url": self.url,
            "unit": "" if self.spec.hand_run else self.id,
            "port": self.spec.port,
            "pid": int(self.p["MainPID"]),
            "state": self.p["ActiveState"],
            "sub_state": self.p["SubState"],
            "result": self.p["Result"],
            "n_restarts": int(self.p["NRestarts"]),
            "restart": self.spec.restart,
        }


RUNTIME_RESET = {
    "MainPID": "0",
    "ControlPID": "0",
    "Result": "success",
    "NRestarts": "0",
    "ExecMainStartTimestamp": "",
    "ExecMainExitTimestamp": "",
    "ExecMainPID": "0",
    "ExecMainCode": "0",
    "ExecMainStatus": "0",
    "ControlGroup": "",
    "ActiveState": "inactive",
    "SubState": "dead",
    "StateChangeTimestamp": "",
    "InactiveExitTimestamp": "",
    "ActiveEnterTimestamp": "",
    "ActiveExitTimestamp": "",
    "InactiveEnterTimestamp": "",
    "InvocationID": "",
}


def d_timeout(eff: dict):
    return (eff.get("directives") or {}).get("TimeoutStartSec", {}).get("value")


def _span(value, default: float) -> float:
    """A unit file's time span (`90`, `0.5s`, `1min 30s`, `1h`) in seconds."""
    if value is None:
        return default
    from sparkops.collectors.unitconfig import timespan_s

    got = timespan_s(value)
    return default if got is None else got


def _exec_struct(argv: list[str], run: dict | None = None) -> str:
    """An Exec property as `systemctl show` prints it (argv joined with spaces), with its last RUN
    ({pid, start, stop, rc}: rc None while it runs, -9 when killed) as systemd keeps it until the
    unit's next start: `pid=`, `code=exited ; status=2` or `code=killed ; status=9/KILL`."""
    if not argv:
        return ""
    state = "start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0"
    if run:
        rc = run.get("rc")
        code = "(null) ; status=0/0" if rc is None else "killed ; status=9/KILL" if rc < 0 else f"exited ; status={rc}"
        stop = sd.fmt_timestamp(run.get("stop"), "pretty") or "n/a"
        state = f"start_time=[{sd.fmt_timestamp(run['start'], 'pretty')}] ; stop_time=[{stop}] ; pid={run['pid']} ; code={code}"
    return f"{{ path={argv[0]} ; argv[]={' '.join(argv)} ; ignore_errors=no ; {state} }}"


def exec_start_post_property(posts: list[dict], runs: dict[int, dict]) -> str:
    """ExecStartPost= as show prints it, with RUNS (by the command's index) of this start."""
    return " ".join(_exec_struct(c["argv"], runs.get(i)) for i, c in enumerate(posts))


def _quoted(word: str) -> str:
    return f'"{word}"' if any(c.isspace() for c in word) else word


def _bytes(value) -> str:
    """MemoryMax=112G → bytes, as show prints it; unset → infinity."""
    if not value or value == "infinity":
        return "infinity"
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        return str(int(float(value[:-1]) * mult[value[-1].upper()])) if value[-1].upper() in mult else str(int(value))
    except ValueError:
        return "infinity"


def _quota(value) -> str:
    """CPUQuota=600% → CPUQuotaPerSecUSec=6s."""
    if not value or not value.endswith("%"):
        return "infinity"
    return sd.fmt_timespan(float(value[:-1]) / 100)
