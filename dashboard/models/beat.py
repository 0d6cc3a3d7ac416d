"""Which of django-celery-beat's rows the static schedule (dashboard/schedule.py) owns."""

from django.db import models


class StaticBeatEntry(models.Model):
    """A PeriodicTask row that beat copied from the static schedule. django-celery-beat never deletes
    such a row; beat (dashboard/beat.py) deletes the marked ones the code no longer declares, and
    leaves every unmarked row alone (profile crons made in the UI, whatever their name)."""

    task = models.OneToOneField(
        "django_celery_beat.PeriodicTask", on_delete=models.CASCADE, primary_key=True, related_name="static_entry"
    )

    def __str__(self):
        return f"static beat entry {self.task_id}"
