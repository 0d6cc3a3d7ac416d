"""Beat entries of this concern (merged by dashboard/schedule.py): the store's upkeep. Every
entry expires after its own period, so a stalled worker drops stale runs instead of piling
them up. The polls are not here: each worker's resident poller runs them on the clock
(dashboard/services/resident.py), because a Celery task per poll cost five times the CPU
budget of bench/poll_overhead.py."""


def schedule_entries():
    return {
        # 1-minute min/mean/max rollups of the last few complete minutes (idempotent upserts).
        "collectors-rollups-minute": {"task": "collectors.rollups_minute", "schedule": 60.0, "options": {"expires": 60.0}},
        # 1-hour rollups from the minute rollups.
        "collectors-rollups-hour": {"task": "collectors.rollups_hour", "schedule": 600.0, "options": {"expires": 600.0}},
        # Retention: raw 48 h, minute rollups 90 days, hourly for ever.
        "collectors-retention": {"task": "collectors.retention", "schedule": 3600.0, "options": {"expires": 3600.0}},
    }
