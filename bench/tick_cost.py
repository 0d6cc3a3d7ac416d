"""CPU cost of one resident-poller tick, phase by phase (the breakdown behind poll_overhead.py).

Runs a ResidentPoller's metrics and probe cycles back to back in this process against the
same three simulated engines and host sources as bench/poll_overhead.py, and prints the
thread CPU time (user + system) per cycle and per phase. Phases nest: `metrics_tick`
contains `host_collect`, `engines_fetch`, holding and storing the rows, the alert
evaluations and the live publisher.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/sparkops_bench REDIS_URL=redis://127.0.0.1:6379/2 \\
        .venv/bin/python bench/tick_cost.py [--ticks 200]
"""

import argparse
import cProfile
import functools
import gc
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")

from poll_overhead import BIN, SERVE, sim_state  # noqa: E402

SPENT = {}


def timed(owner, name, label=None):
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        start = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            key = label or name
            count, total = SPENT.get(key, (0, 0.0))
            SPENT[key] = (count + 1, total + time.thread_time() - start)

    setattr(owner, name, wrapper)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--profile", help="write a cProfile of the metrics cycles here")
    args = parser.parse_args()
    os.environ.update(
        {
            "SPARKOPS_HOST_NAME": "bench-box",
            "SPARKOPS_SIM_STATE_DIR": sim_state(),
            "SPARKOPS_SYSTEMCTL": f"{BIN}/sim-systemctl",
            "SPARKOPS_JOURNALCTL": f"{BIN}/sim-journalctl",
            "SPARKOPS_NVIDIA_SMI": f"{BIN}/sim-nvidia-smi",
            "SPARKOPS_GPU_BACKEND": "nvidia-smi",
            "LOG_LEVEL": "WARNING",
        }
    )
    import django

    django.setup()
    from _fleet import watch_only
    from django.core.management import call_command

    from dashboard.models import Host
    from dashboard.samples import store
    from sparkops.alerts import evaluate as alert_evaluate
    from sparkops.collectors import hostread
    from sparkops.live.publish import LivePublisher
    from sparkops.poller import exits, fetch, fleet, liveness, resident
    from sparkops.poller.pending import PendingWrites

    call_command("migrate", verbosity=0)
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, text=True
    )
    try:
        engines = json.loads(server.stdout.readline())
        host, _ = Host.objects.get_or_create(name="bench-box")
        watch_only(
            host,
            {f"bench-{kind}": {"kind": kind, "url": url, "unit": f"bench-{kind}.service"} for kind, url in engines},
        )
        for owner, name in (
            (resident.ResidentPoller, "metrics_tick"),
            (fetch, "host_collect"),
            (fetch, "engines_fetch"),
            (PendingWrites, "add_host"),
            (PendingWrites, "add_engine"),
            (PendingWrites, "flush"),
            (fleet, "fleet_roles"),
            (hostread.hostsrc, "read_psi"),
            (hostread, "_memory"),
            (hostread.gpu, "read_gpus"),
            (hostread.processes, "read_compilers"),
            (hostread, "_units"),
            (hostread, "_journal"),
            (liveness, "engines_probe"),
            (store, "samples_insert"),
            (store, "states_put"),
            (liveness, "liveness_record"),
            (resident.ResidentPoller, "probe_tick"),
        ):
            timed(owner, name)
        from django.db.models.query import QuerySet

        timed(QuerySet, "bulk_update", "QuerySet.bulk_update")
        timed(QuerySet, "update", "QuerySet.update")
        for name in ("evaluate_polled", "evaluate_host", "evaluate_liveness"):
            timed(alert_evaluate, name, f"alerts.{name}")
            for poller_module in (resident, exits):  # the poller imported them by name
                if hasattr(poller_module, name):
                    timed(poller_module, name, f"alerts.{name}")
        for name in ("engines_polled", "host_polled", "liveness"):
            timed(LivePublisher, name, f"live.{name}")
        poller = resident.ResidentPoller("bench-box")
        interval = poller.poll_interval
        for _ in range(5):  # warm up: connections, caches, first ledger rows
            poller.run_duty("metrics")
            poller.run_duty("probe")
            time.sleep(interval / 2)
        SPENT.clear()

        gc_spent = {"start": 0.0, "total": 0.0, "count": 0}

        def gc_timer(phase, info):  # noqa: ARG001 (gc.callbacks' signature)
            if phase == "start":
                gc_spent["start"] = time.thread_time()
            else:
                gc_spent["total"] += time.thread_time() - gc_spent["start"]
                gc_spent["count"] += 1

        gc.callbacks.append(gc_timer)
        profile = None
        if args.profile:
            profile = cProfile.Profile()
        metrics_cpu = probe_cpu = 0.0
        wall0 = time.monotonic()
        for _ in range(args.ticks):
            start = time.thread_time()
            if profile:
                profile.enable()
            poller.run_duty("metrics")
            if profile:
                profile.disable()
            metrics_cpu += time.thread_time() - start
            start = time.thread_time()
            poller.run_duty("probe")
            probe_cpu += time.thread_time() - start
            time.sleep(interval / 2)  # engines' counters move between polls, as in production
            start = time.thread_time()
            poller.run_duty("probe")
            probe_cpu += time.thread_time() - start
            time.sleep(interval / 2)
        elapsed = time.monotonic() - wall0
        n = args.ticks
        print(f"{n} metrics cycles and {2 * n} probe cycles over {elapsed:.0f} s; cycles counted: {poller.cycles}")
        print(
            f"metrics cycle: {metrics_cpu / n * 1000:.2f} ms CPU; probe cycle: {probe_cpu / (2 * n) * 1000:.2f} ms CPU"
        )
        per_s = (metrics_cpu + probe_cpu) / (n * interval)
        print(f"=> {per_s * 100:.2f} % of one core at a {interval:g} s poll interval (this thread only, no Celery)")
        print(
            f"  garbage collection: {gc_spent['total'] / n * 1000:.2f} ms per metrics cycle ({gc_spent['count']} collections)"
        )
        for name, (count, total) in sorted(SPENT.items(), key=lambda kv: -kv[1][1]):
            print(f"  {name:32s} {total / n * 1000:7.2f} ms per metrics cycle ({count} calls)")
        if profile:
            profile.dump_stats(args.profile)
    finally:
        server.stdin.close()
        server.wait(timeout=15)


if __name__ == "__main__":
    main()
