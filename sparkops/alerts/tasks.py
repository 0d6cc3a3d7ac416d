"""Thin Celery tasks: load by id, call a service. Retries live in the outbox rows, not in Celery.
The task that sends one delivery (`alerts.deliver`) is the outbox's (alerts/outbox.py), which queues it."""

from celery import shared_task

from .conf import leader_ran
from .evaluate import evaluate_beat
from .lifecycle import renotify_due
from .outbox import sweep


@shared_task(name="alerts.sweep_outbox", ignore_result=True)
def sweep_outbox() -> None:
    """Beat's backstop of the leading worker's outbox sweep: nothing to do while the leader sweeps."""
    if not leader_ran("alerts-sweep-outbox"):
        sweep()


@shared_task(name="alerts.check_stale", ignore_result=True)
def check_stale() -> None:
    """Beat's backstop of the leading worker's collector-stale check: nothing while the leader checks."""
    if not leader_ran("alerts-check-stale"):
        evaluate_beat()


@shared_task(name="alerts.renotify", ignore_result=True)
def renotify() -> None:
    renotify_due()
