"""Beat entries of this concern (merged by dashboard/schedule.py). Every entry expires
after its own period: a stalled worker drops stale polls instead of piling them up."""
from django.conf import settings


def schedule_entries():
    poll, live = settings.SPARKOPS_POLL_INTERVAL, settings.SPARKOPS_LIVENESS_INTERVAL
    return {
        # Engine metrics (each engine at its own interval, never faster than this tick) + host fan-out to host.<name>.
        "collectors-tick": {"task": "collectors.tick", "schedule": poll, "options": {"expires": poll}},
        # Liveness: one cheap request per engine, failed probes re-checked ~0.3 s later.
        "collectors-probe": {"task": "collectors.probe", "schedule": live, "options": {"expires": live}},
        # 1-minute min/mean/max rollups of the last few complete minutes (idempotent upserts).
        "collectors-rollups-minute": {"task": "collectors.rollups_minute", "schedule": 60.0, "options": {"expires": 60.0}},
        # 1-hour rollups from the minute rollups.
        "collectors-rollups-hour": {"task": "collectors.rollups_hour", "schedule": 600.0, "options": {"expires": 600.0}},
        # Retention: raw 48 h, minute rollups 90 days, hourly for ever.
        "collectors-retention": {"task": "collectors.retention", "schedule": 3600.0, "options": {"expires": 3600.0}},
    }
