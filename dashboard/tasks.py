"""Collector tasks: thin — load by id, call a service. Polls are never retried: the next
tick is the retry, and a stale poll is worth less than none (every entry has `expires`)."""
from celery import shared_task
from django.conf import settings

from dashboard.collectors import store
from dashboard.models import Engine, Host
from dashboard.services import polling


@shared_task(name="collectors.tick", ignore_result=True)
def tick():
    """Metrics of every engine that is due (concurrently), then fan out each host's sources."""
    polling.engines_poll(engines=polling.engines_due())
    interval = settings.SPARKOPS_POLL_INTERVAL
    for host in Host.objects.only("pk", "name"):
        poll_host.apply_async(args=[host.pk], queue=host.queue, expires=interval)


@shared_task(name="collectors.probe", ignore_result=True)
def probe():
    """Liveness of every engine (one request each, re-checked at once on failure)."""
    polling.engines_probe(engines=Engine.objects.select_related("host"))


@shared_task(name="collectors.poll_engine", ignore_result=True)
def poll_engine(engine_id):
    engine = Engine.objects.select_related("host").filter(pk=engine_id).first()
    if engine:
        polling.engine_poll(engine=engine)


@shared_task(name="collectors.poll_host", ignore_result=True)
def poll_host(host_id):
    host = Host.objects.filter(pk=host_id).first()
    if host:
        polling.host_poll(host=host)


@shared_task(name="collectors.rollups_minute", ignore_result=True)
def rollups_minute():
    store.rollups_minute()


@shared_task(name="collectors.rollups_hour", ignore_result=True)
def rollups_hour():
    store.rollups_hour()


@shared_task(name="collectors.retention", ignore_result=True)
def retention():
    store.retention_apply()
