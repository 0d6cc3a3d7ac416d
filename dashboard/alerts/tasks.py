"""Thin Celery tasks: load by id, call a service. Retries live in the outbox rows, not in Celery."""

from celery import shared_task


@shared_task(name="alerts.deliver", ignore_result=True)
def deliver(delivery_id):
    from .outbox import delivery_send

    delivery_send(delivery_id=delivery_id)


@shared_task(name="alerts.sweep_outbox", ignore_result=True)
def sweep_outbox():
    from .outbox import sweep

    sweep()


@shared_task(name="alerts.check_stale", ignore_result=True)
def check_stale():
    from .evaluate import evaluate_beat

    evaluate_beat()


@shared_task(name="alerts.renotify", ignore_result=True)
def renotify():
    from .lifecycle import renotify_due

    renotify_due()
