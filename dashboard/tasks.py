"""Collector tasks: the slow, periodic store upkeep. The polls themselves are not Celery
tasks: each worker's resident poller runs them on the clock (sparkops/poller/resident.py)."""

from celery import shared_task

from dashboard.samples import store
from dashboard.unit_actions import unit_restart  # noqa: F401 — registered with the worker
from sparkops.controls.unitfix_tasks import unit_fix  # noqa: F401 — registered with the worker


@shared_task(name="collectors.rollups_minute", ignore_result=True)
def rollups_minute() -> None:
    store.rollups_minute()


@shared_task(name="collectors.rollups_hour", ignore_result=True)
def rollups_hour() -> None:
    store.rollups_hour()


@shared_task(name="collectors.retention", ignore_result=True)
def retention() -> None:
    store.retention_apply()
