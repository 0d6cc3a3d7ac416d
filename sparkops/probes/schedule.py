"""Probe scheduling: each profile's cron in django-celery-beat (PeriodicTask + CrontabSchedule). A
scheduled probe waits like a scheduled benchmark (the lifecycle of every measured kind, in
sparkops/measured/kinds.py): a run row at once, queued with the reason while an engine of its
box is starting, released by the beat sweep."""

from .kind import PROBE

probe_set_schedule = PROBE.set_schedule
profile_run_scheduled = PROBE.run_scheduled
probe_runs_release_postponed = PROBE.release_postponed
probe_runs_sweep_stale = PROBE.sweep_stale
