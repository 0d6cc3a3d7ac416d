"""What observing the launch configuration costs (sparkops/launch/).

Three simulated engines (vLLM, llama.cpp, SGLang) under the simulator's systemd, each with
its unit files; the resident poller's observer runs every 60 s and at once on a change, and
on every other tick only compares a signature. Prints, for both, wall and CPU time per call:

    .venv/bin/python bench/launchconfig_cost.py [--observations 20] [--ticks 2000]

(the database: DATABASE_URL, else a SQLite file in a temporary SPARKOPS_VAR_DIR). The
simulator's `sim-systemctl` is a Python process (~0.1 s to start); the real systemctl starts in
a few milliseconds, so the observation figure here is an upper bound."""

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
    parser.add_argument("--observations", type=int, default=20)
    parser.add_argument("--ticks", type=int, default=2000)
    args = parser.parse_args()
    from simulator.client import Simulation

    var = tempfile.mkdtemp(prefix="sparkops-lcfg-bench-")
    with Simulation(
        engines=["vllm:b-vllm", "llamacpp:b-llama", "sglang:b-sglang"], state_dir=os.path.join(var, "sim")
    ) as sim:
        os.environ.update(
            {
                "SPARKOPS_VAR_DIR": var,
                "SPARKOPS_SIM_STATE_DIR": str(sim.state_dir),
                "SPARKOPS_SYSTEMCTL": str(sim.bin_dir / "sim-systemctl"),
                "SPARKOPS_HOST_ROOT": str(sim.root),
                "LOG_LEVEL": "WARNING",
                "SPARKOPS_HOST_NAME": "bench-box",
            }
        )
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        from dashboard.models import ConfigSnapshot, Engine, Host
        from sparkops.launch.observer import Observer

        host, _ = Host.objects.get_or_create(name="bench-box")
        engines = [
            Engine.objects.update_or_create(
                name=n, defaults=dict(kind=k, url=sim.url(n), host=host, unit=sim.unit(n), status="up")
            )[0]
            for n, k in (("b-vllm", "vllm"), ("b-llama", "llamacpp"), ("b-sglang", "sglang"))
        ]
        observer = Observer()
        observer.observe(engines)  # the first snapshots
        walls, cpus = [], []
        for _ in range(args.observations):
            w, c = time.perf_counter(), time.process_time()
            made = observer.observe(engines)
            walls.append(time.perf_counter() - w)
            cpus.append(time.process_time() - c)
            assert not made, "nothing changed, so no new snapshot"
        units = {e.unit: {"MainPID": "1", "ExecMainStartTimestamp": "x", "ActiveState": "active"} for e in engines}
        observer.tick(engines=engines, units=units)
        w, c = time.perf_counter(), time.process_time()
        for _ in range(args.ticks):
            observer.tick(engines=engines, units=units)
        tick_wall, tick_cpu = (time.perf_counter() - w) / args.ticks, (time.process_time() - c) / args.ticks
        print(f"engines: {len(engines)}; snapshots stored: {ConfigSnapshot.objects.count()}")
        print(
            f"observation (3 units: show, cat, dependencies; 3 accounts; hash): wall median {statistics.median(walls) * 1000:.0f} ms, "
            f"max {max(walls) * 1000:.0f} ms; CPU of this process median {statistics.median(cpus) * 1000:.1f} ms"
        )
        print(f"ordinary tick (signature check): wall {tick_wall * 1e6:.1f} µs, CPU {tick_cpu * 1e6:.1f} µs")
        print(
            f"per 2 s tick, amortized over 60 s: {statistics.median(walls) / 30 * 1000 + tick_wall * 1000:.1f} ms wall"
        )


if __name__ == "__main__":
    main()
