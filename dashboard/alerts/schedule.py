"""Beat entries and resident duties of this concern (merged by dashboard/schedule.py)."""
from . import conf

BACKSTOP_S = 30.0


def resident_duties():
    """Run by the fleet's leading worker between its polls (dashboard/services/resident.py):
    a Celery task every 2 s cost more CPU than the polls themselves. Every
    SPARKOPS_ALERT_SWEEP_S (5 s): retries wait up to that much past their backoff, and a
    silent collector is flagged 6–11 s after its last report instead of 6–8 s."""
    from .evaluate import evaluate_beat
    from .outbox import sweep

    return {
        # Re-queue deliveries whose enqueue was lost or whose worker died, and retries now due.
        "alerts-sweep-outbox": (conf.sweep_interval_s(), sweep),
        # Collector-stale check: on the leader's box, apart from the other boxes it watches.
        "alerts-check-stale": (conf.sweep_interval_s(), evaluate_beat),
    }


def schedule_entries():
    return {
        # Backstops of the resident duties above, should the leading worker's poller hang.
        "alerts-sweep-outbox": {"task": "alerts.sweep_outbox", "schedule": BACKSTOP_S, "options": {"expires": BACKSTOP_S}},
        "alerts-check-stale": {"task": "alerts.check_stale", "schedule": BACKSTOP_S, "options": {"expires": BACKSTOP_S}},
        # Re-notify unacknowledged critical alerts whose interval has passed.
        "alerts-renotify": {"task": "alerts.renotify", "schedule": 30.0, "options": {"expires": 30.0}},
    }
