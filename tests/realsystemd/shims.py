"""`vllm` on PATH for tests: a script whose process reads like vLLM's own console script
(`python …/vllm serve MODEL --port P …` in /proc/PID/cmdline, which the process scan and
`sparkops launch` recognise) and serves as the simulator's vLLM engine (real HTTP on loopback).
SIM_LOAD_SECONDS in its environment: how long it loads before it listens (vLLM listens only once
built); SIM_NEVER_SERVES=1: it never does; SIM_SERVE_WHEN=PATH: it loads until PATH exists (a test
says when its start ends)."""

from __future__ import annotations

import sys
from pathlib import Path

from simulator.supervisor import REPO_ROOT

VLLM = r"""#!{python}
import os, sys
sys.path.insert(0, {root!r})
args = sys.argv[1:]
assert args[:1] == ["serve"], args
model, opts, i = args[1], {{}}, 2
while i < len(args):
    key, _, value = args[i].partition("=")
    if not value:
        value, i = args[i + 1], i + 1
    opts[key] = value
    i += 1
import time
while os.environ.get("SIM_SERVE_WHEN") and not os.path.exists(os.environ["SIM_SERVE_WHEN"]):
    time.sleep(0.05)
load = "1e6" if os.environ.get("SIM_NEVER_SERVES") else os.environ.get("SIM_LOAD_SECONDS", "0.3")
argv = ["--kind", "vllm", "--name", model, "--model", model, "--port", opts["--port"], "--load-seconds", load]
if "--gpu-memory-utilization" in opts:
    argv += ["--memory-share", opts["--gpu-memory-utilization"]]
from simulator.engine import main
sys.exit(main(argv))
"""


def install(bin_dir: Path) -> Path:
    """Write `vllm` into BIN_DIR (made if needed); returns BIN_DIR, to put first on PATH."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "vllm"
    path.write_text(VLLM.format(python=sys.executable, root=str(REPO_ROOT)))
    path.chmod(0o755)
    return bin_dir
