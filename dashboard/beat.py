"""The beat scheduler: django-celery-beat's database scheduler (benchmark schedules are
edited in the UI), with two changes:

- it asks the database whether the schedule changed at most every 10 s instead of on every
  tick (with 1 s ticks that query was most of beat's CPU);
- at start it deletes the rows of static entries that `dashboard/schedule.py` no longer
  declares. django-celery-beat copies the static schedule into PeriodicTask rows and never
  removes one, so an entry dropped from the code would go on being sent for ever, to a task
  that may not exist. Beat marks each row it copied (`StaticBeatEntry`), so a row is the
  schedule's by that mark, never by its name.

It also touches VAR_DIR/beat.alive every ALIVE_EVERY_S while it ticks: the docker-compose
healthcheck of beat reads its age (beat has no port to ask)."""

import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.conf import settings
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler

from dashboard.models import StaticBeatEntry

log = logging.getLogger(__name__)
CHANGE_CHECK_S = 10.0
ALIVE_EVERY_S = 10.0


def alive_path() -> Path:
    return Path(settings.VAR_DIR) / "beat.alive"


def retired_static_entries(current: Iterable[str]) -> list[str]:
    """Delete the PeriodicTask rows the static schedule made (marked by a StaticBeatEntry) that
    CURRENT no longer declares; their names. Rows made in the UI are never marked."""

    retired = PeriodicTask.objects.filter(static_entry__isnull=False).exclude(name__in=list(current))
    names = sorted(retired.values_list("name", flat=True))
    if names:
        retired.delete()
    return names


def mark_static_entries(current: Iterable[str]) -> None:
    """Mark the PeriodicTask rows beat has just copied from CURRENT (the static schedule) as its own."""

    unmarked = PeriodicTask.objects.filter(name__in=list(current), static_entry__isnull=True)
    StaticBeatEntry.objects.bulk_create(
        [StaticBeatEntry(task_id=pk) for pk in unmarked.values_list("pk", flat=True)], ignore_conflicts=True
    )


class SparkOpsScheduler(DatabaseScheduler):
    _next_change_check = 0.0
    _next_alive = 0.0

    def tick(self, *args: Any, **kwargs: Any) -> float:
        interval = super().tick(*args, **kwargs)
        now = time.monotonic()
        if now >= self._next_alive:
            self._next_alive = now + ALIVE_EVERY_S
            try:
                alive_path().touch()
            except OSError as exc:
                log.warning("beat: cannot touch %s (its healthcheck will fail): %s", alive_path(), exc)
        return interval

    def setup_schedule(self) -> None:
        retired_static_entries(self.app.conf.beat_schedule)
        super().setup_schedule()
        mark_static_entries(self.app.conf.beat_schedule)

    def schedule_changed(self) -> bool:
        now = time.monotonic()
        if now < self._next_change_check:
            return False
        self._next_change_check = now + CHANGE_CHECK_S
        return super().schedule_changed()
