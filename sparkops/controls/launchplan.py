"""What `sparkops launch` is asked to start, and the compile caps it starts it with: the engine's
argv read into a Plan (its kind, address and flags), the caps in force for the box put into its
environment, and Refused, which every step of the guarded launch path (`controls.launch`) raises
when the launch does not go ahead."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from sparkops.collectors import flags as flagmodel
from sparkops.collectors import handrun

PREFIX = "sparkops launch:"
CAPS = ("MAX_JOBS", "NVCC_THREADS", "TORCHINDUCTOR_COMPILE_THREADS", "FLASHINFER_NVCC_THREADS")


class Refused(Exception):
    """The launch does not go ahead; the message says why, with the numbers."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class Cap(TypedDict):
    """One compile cap as the launch set it: VALUE in the engine's environment, what the shell
    had (WAS, None: unset) and the box's threshold (CAP)."""

    value: str
    was: str | None
    cap: int


@dataclass
class Plan:
    argv: list[str]
    kind: str
    url: str
    host: str
    port: int
    flags: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    caps: dict[str, Cap] = field(default_factory=dict)
    share: float | None = None
    share_basis: str = ""


# --- 0. what is being launched --------------------------------------------------------------


def plan_of(argv: Sequence[str], env: Mapping[str, str]) -> Plan:
    if not argv:
        raise Refused("nothing to launch: sparkops launch [options] -- vllm serve MODEL …", code=2)
    kind = handrun.is_engine_launch(argv)
    if kind is None:
        raise Refused(
            f"not an engine server launch: {' '.join(argv[:4])} (vllm serve …, llama-server …, "
            "python -m sglang.launch_server …)",
            code=2,
        )
    if shutil.which(argv[0], path=env.get("PATH")) is None:
        raise Refused(f"{argv[0]}: not found on PATH", code=2)
    parsed = flagmodel.parse_argv(kind, argv, env=env)
    host = str(parsed.flags.get("--host") or "127.0.0.1")
    try:
        port = int(parsed.flags.get("--port") or handrun.DEFAULT_PORT[kind])
    except ValueError:
        raise Refused(f"--port {parsed.flags.get('--port')!r} is not a port number", code=2) from None
    local = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return Plan(list(argv), kind, f"http://{local}:{port}", local, port, dict(parsed.flags))


# --- 1. the compile caps --------------------------------------------------------------------


def capped_environment(
    env: Mapping[str, str], caps_in_force: Mapping[str, Any]
) -> tuple[dict[str, str], dict[str, Cap]]:
    """(the engine's environment, {NAME: {value, was}}): each cap set to the box's threshold
    unless the shell already holds a whole number at or below it."""
    out, record = dict(env), dict[str, Cap]()
    for name in CAPS:
        cap, was = int(caps_in_force[name.lower()]), env.get(name)
        keep = was is not None and was.strip().isdigit() and 0 < int(was) <= cap
        out[name] = was.strip() if keep and was is not None else str(cap)
        record[name] = {"value": out[name], "was": was, "cap": cap}
    return out, record


def caps_text(record: Mapping[str, Cap]) -> str:
    return " ".join(f"{n}={c['value']}" + (" (kept)" if _kept(c) else "") for n, c in record.items())


def _kept(cap: Cap) -> bool:
    """Whether the shell's own value stayed (it was already at or below the cap)."""
    was = cap["was"]
    return was is not None and was.strip() == cap["value"]
