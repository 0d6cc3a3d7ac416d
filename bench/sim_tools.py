"""What one call of the simulator's CLI stand-ins (sim-systemctl, sim-journalctl, sim-nvidia-smi)
costs: the collectors call them on every tick, and a test run makes about 1,500 calls (1,182
systemctl and 340 journalctl in one SQLite run, by process accounting), so their start is most of
their cost. The wrappers find their folder without a subshell and run Python without site (`-S`)
and without runpy (`-c`); this prints the CPU (user + system) per call, median of N rounds of 20
calls, of the stand-ins as they are and of the same modules started the old way
(`python -m simulator.bin.X`, with site), and the ratio.

    .venv/bin/python bench/sim_tools.py [--rounds 5]"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / "simulator" / "bin"
CALLS = {
    "systemctl": ["show", "vllm.service", "-p", "ActiveState,SubState,MainPID"],
    "journalctl": ["-u", "vllm.service", "-n", "5", "-o", "json"],
    "nvidia_smi": ["--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits"],
}


def cpu_per_call(cmd, env, calls=20):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(calls):
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / calls * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        (Path(state) / "units").mkdir()
        (Path(state) / "units" / "vllm.service.show").write_text("ActiveState=active\nSubState=running\nMainPID=42\n")
        env = dict(os.environ, SPARKOPS_SIM_STATE_DIR=state, SPARKOPS_SIM_PYTHON=sys.executable)
        old_env = dict(env, PYTHONPATH=str(ROOT))
        for module, argv in CALLS.items():
            wrapper = [str(BIN / f"sim-{module.replace('_', '-')}"), *argv]
            old = [sys.executable, "-m", f"simulator.bin.{module}", *argv]
            now_ms = statistics.median(cpu_per_call(wrapper, env) for _ in range(args.rounds))
            old_ms = statistics.median(cpu_per_call(old, old_env) for _ in range(args.rounds))
            print(
                f"{module:11s} {now_ms:6.1f} ms a call (python -m with site: {old_ms:6.1f} ms, {now_ms / old_ms:.2f}x)"
            )


if __name__ == "__main__":
    main()
