"""Benchmarks as a measured-run kind: what differs from a quality probe, declared for the core
(sparkops/measured/kinds.py). The stale sweep also fails the sweeps whose worker died."""

from sparkops.measured.kinds import Kind

from .models import Profile, Run

BENCH = Kind(
    label="bench",
    namespace="bench",
    what="benchmark",
    profile_model=Profile,
    run_model=Run,
    create="sparkops.benchmarks.services.run_create",
    execute="sparkops.benchmarks.services.run_execute",
    summary="sparkops.benchmarks.services.run_summary",
    also_stale="sparkops.benchmarks.sweep.sweeps_fail_stale",
)
