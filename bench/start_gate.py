"""What the start gate costs and what the simulated readiness helper adds to a start.

Two simulated engines under the simulator's systemd; the resident poller stores the box's unit
states. Prints:

- `box_starting(engine)` (sparkops/measured/conditions.py): wall time and queries per call,
  with the box at rest and while one engine is inside its start;
- a warm restart's phases: the restart → the engine's first /health 200 → the unit active (the
  helper's lag: it polls every 50 ms and is a Python process to start) → the gate open.

    .venv/bin/python bench/start_gate.py [--calls 200] [--restarts 5]

(the database: DATABASE_URL, else a SQLite file in a temporary SPARKOPS_VAR_DIR)."""

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--restarts", type=int, default=5)
    args = parser.parse_args()
    import httpx

    from simulator.client import Simulation

    var = tempfile.mkdtemp(prefix="sparkops-gate-bench-")
    with Simulation(engines=["vllm:g-vllm", "llamacpp:g-llama"], state_dir=os.path.join(var, "sim")) as sim:
        os.environ.update(
            {
                "SPARKOPS_VAR_DIR": var,
                "SPARKOPS_SIM_STATE_DIR": str(sim.state_dir),
                "SPARKOPS_SYSTEMCTL": str(sim.bin_dir / "sim-systemctl"),
                "SPARKOPS_JOURNALCTL": str(sim.bin_dir / "sim-journalctl"),
                "SPARKOPS_NVIDIA_SMI": str(sim.bin_dir / "sim-nvidia-smi"),
                "SPARKOPS_GPU_BACKEND": "nvidia-smi",
                "SPARKOPS_PROC_ROOT": str(sim.state_dir / "proc"),
                "SPARKOPS_HOST_ROOT": str(sim.root),
                "LOG_LEVEL": "WARNING",
                "SPARKOPS_HOST_NAME": "gate-box",
            }
        )
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        call_command("migrate", verbosity=0)
        from dashboard.models import Engine, Host
        from sparkops.measured.conditions import box_starting
        from sparkops.poller.resident import ResidentPoller

        host, _ = Host.objects.get_or_create(name="gate-box")
        for n, k in (("g-vllm", "vllm"), ("g-llama", "llamacpp")):
            Engine.objects.update_or_create(name=n, defaults=dict(kind=k, url=sim.url(n), host=host, unit=sim.unit(n)))
        poller = ResidentPoller("gate-box", duties={}, flush_interval=0)
        poller.metrics_tick()

        def gate():
            return box_starting(Engine.objects.select_related("host").get(name="g-llama"))

        def cost(label):
            with CaptureQueriesContext(connection) as ctx:
                gate()
            w = time.perf_counter()
            for _ in range(args.calls):
                gate()
            print(f"box_starting, {label}: {(time.perf_counter() - w) / args.calls * 1000:.2f} ms, {len(ctx)} queries")

        cost("box at rest")
        phases = {"first 200": [], "unit active": [], "gate open": []}
        for i in range(args.restarts):
            t0 = time.monotonic()
            sim.restart("g-vllm")
            poller.metrics_tick()  # the box's worker sees the start
            if i == 0:
                cost("one engine inside its start")
            seen = {}
            while "unit active" not in seen:  # no ticks here: these two are the simulator's own
                now = time.monotonic() - t0
                if "first 200" not in seen:
                    try:
                        if httpx.get(sim.url("g-vllm") + "/health", timeout=0.5).status_code == 200:
                            seen["first 200"] = now
                    except httpx.HTTPError:
                        pass
                if sim.show("g-vllm")["ActiveState"] == "active":
                    seen["unit active"] = time.monotonic() - t0
                time.sleep(0.01)
            while gate() is not None:  # the worker's next ticks store the new state
                poller.metrics_tick()
            seen["gate open"] = time.monotonic() - t0
            for k, v in seen.items():
                phases[k].append(v)
        for k, v in phases.items():
            print(f"warm restart → {k}: median {statistics.median(v):.2f} s (min {min(v):.2f}, max {max(v):.2f})")


if __name__ == "__main__":
    main()
