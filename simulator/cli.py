"""`sparkops simulate` / `python -m simulator`: run the supervisor with its engines.

    [--engine KIND:NAME[:PORT][,key=value...]]... [--state-dir DIR] [--control-port P] [--ports-file FILE]

Prints one JSON line per engine (name, kind, url, unit, control) and writes the same
lines to --ports-file; runs until SIGINT/SIGTERM, then stops every child and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
from pathlib import Path

from .control import ControlAPI
from .service import UnitSpec

# The demo should look alive: synthetic traffic moves the counters, rates and hit rates.
DEFAULT_ENGINES = (
    "vllm:demo-vllm,background_rps=0.5,cold_seconds=7",
    "llamacpp:demo-llama,background_rps=0.3",
    "vllm:smoke-8b,hand_run=1",
)  # a smoke test someone started by hand, outside any unit


def build_parser(prog="sparkops simulate") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Run simulated LLM engines under a systemd-like supervisor.")
    add_arguments(p)
    return p


def add_arguments(p) -> None:
    p.add_argument(
        "--engine",
        action="append",
        default=None,
        metavar="KIND:NAME[:PORT][,key=value...]",
        help=f"engine to run (repeatable); kinds: vllm, llamacpp, sglang, openai. Default: {' '.join(DEFAULT_ENGINES)}",
    )
    p.add_argument("--state-dir", default=None, help="where unit/journal/proc/gpu files go (default: a temp dir)")
    p.add_argument("--control-port", type=int, default=0, help="supervisor control API port (default: free port)")
    p.add_argument("--ports-file", default=None, help="also write the JSON lines here")


async def serve(engines: list[str], state_dir: str | None, control_port: int, ports_file: str | None, out=print) -> int:
    from .supervisor import Supervisor

    specs = [UnitSpec.parse(e) for e in engines]
    if len({s.name for s in specs}) != len(specs):
        raise ValueError("engine names must be unique")
    state = Path(state_dir or tempfile.mkdtemp(prefix="sparkops-sim-"))
    sup = Supervisor(specs, state)
    api = ControlAPI(sup)
    port = await api.start(control_port)
    await sup.start()
    control = f"http://127.0.0.1:{port}"
    (state / "control").write_text(control)  # where the simulated `systemctl daemon-reload` asks
    lines = [
        json.dumps(
            {
                "name": u.spec.name,
                "kind": u.spec.kind,
                "url": u.url,
                "unit": u.info()["unit"],
                "control": control,
                "state_dir": str(state),
                **({"hand_run": True} if u.spec.hand_run else {}),
            }
        )
        for u in sup.units.values()
    ]
    for line in lines:
        out(line)
    if ports_file:
        tmp = Path(ports_file).with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in lines))
        tmp.replace(ports_file)  # readers never see a half-written file
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await sup.shutdown()
    await api.server.close()
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return run_from_args(args)


def run_from_args(args, out=None) -> int:
    out = out or (lambda line: print(line, flush=True))
    try:
        return asyncio.run(
            serve(args.engine or list(DEFAULT_ENGINES), args.state_dir, args.control_port, args.ports_file, out)
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
