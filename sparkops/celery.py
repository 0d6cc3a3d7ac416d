"""The Celery app. Tasks live in dashboard/**/tasks.py; the static schedule in dashboard/schedule.py."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")

app = Celery("sparkops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_finalize.connect
def _install_schedule(sender, **kwargs):
    from dashboard.schedule import beat_schedule

    sender.conf.beat_schedule = beat_schedule()
