"""The beat scheduler: django-celery-beat's database scheduler (benchmark schedules are
edited in the UI), asking the database whether the schedule changed at most every 10 s
instead of on every tick — with 1 s liveness ticks that query was most of beat's CPU."""
import time

from django_celery_beat.schedulers import DatabaseScheduler

CHANGE_CHECK_S = 10.0


class SparkOpsScheduler(DatabaseScheduler):
    _next_change_check = 0.0

    def schedule_changed(self):
        now = time.monotonic()
        if now < self._next_change_check:
            return False
        self._next_change_check = now + CHANGE_CHECK_S
        return super().schedule_changed()
