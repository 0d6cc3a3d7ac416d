"""The Celery app. Tasks live in dashboard/**/tasks.py; the static schedule in dashboard/schedule.py."""

import logging
import os
from logging.config import dictConfig
from typing import Any

from celery import Celery
from celery.signals import setup_logging
from django.conf import settings

from sparkops.arenas import cap_arenas

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")
# Worker and beat start their threads after this import: each would keep a malloc arena of its own
# (beat made 4 for its 5 threads). Capped at two, in every process that loads the app.
cap_arenas()

app = Celery("sparkops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_finalize.connect
def _install_schedule(sender: Celery, **kwargs: Any) -> None:
    from dashboard.schedule import beat_schedule

    sender.conf.beat_schedule = beat_schedule()


@setup_logging.connect
def _logging_as_django(loglevel: int | str | None = None, **kwargs: Any) -> None:
    """Worker and beat log through settings.LOGGING (SPARKOPS_LOG_FORMAT, no second timestamp
    under journald), not Celery's own format; --loglevel still sets the level."""

    dictConfig(settings.LOGGING)
    if loglevel:
        logging.getLogger().setLevel(loglevel)
