"""A quality probe's Celery tasks are every measured kind's (sparkops/measured/tasks.py), made for
probes under their "probe." names. No retries: a failed probe is a result to keep, and a scheduled
probe that meets a starting box waits as a queued run row (see schedule.py), not a retry."""

from .kind import PROBE

probe_run_execute_task = PROBE.tasks.run_execute
probe_profile_scheduled = PROBE.tasks.profile_scheduled
probe_release_postponed = PROBE.tasks.release_postponed
probe_sweep_stale = PROBE.tasks.sweep_stale
