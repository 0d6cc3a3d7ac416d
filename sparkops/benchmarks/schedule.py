"""Benchmark scheduling. Each profile's cron lives in the database (django-celery-beat
PeriodicTask + CrontabSchedule, editable in the UI); the lifecycle of a scheduled run (waiting
for its box, release, the stale sweep) is every measured kind's, in sparkops/measured/kinds.py;
the static sweeps themselves are in dashboard/schedule.py."""

from .kind import BENCH

profile_set_schedule = BENCH.set_schedule
profile_run_scheduled = BENCH.run_scheduled
runs_release_postponed = BENCH.release_postponed
runs_sweep_stale = BENCH.sweep_stale
