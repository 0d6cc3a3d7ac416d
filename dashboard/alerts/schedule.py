"""Beat entries of this concern (merged by dashboard/schedule.py)."""
from . import conf


def schedule_entries():
    sweep = conf.sweep_interval_s()
    return {
        # Re-queue deliveries whose enqueue was lost or whose worker died, and retries now due.
        "alerts-sweep-outbox": {"task": "alerts.sweep_outbox", "schedule": sweep, "options": {"expires": sweep}},
        # Collector-stale check, run apart from the host workers it watches.
        "alerts-check-stale": {"task": "alerts.check_stale", "schedule": 2.0, "options": {"expires": 2.0}},
        # Re-notify unacknowledged critical alerts whose interval has passed.
        "alerts-renotify": {"task": "alerts.renotify", "schedule": 30.0, "options": {"expires": 30.0}},
    }
