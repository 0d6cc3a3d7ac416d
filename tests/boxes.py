"""A box whose worker is there, and that worker's work. Controls for a box (a restart, a unit fix,
a benchmark run) are refused unless its worker reported within collector_stale's limit
(`poller.fleet.box_reachable`): a test that sends one says its worker reported, just before, by
the clock that judges it. What is sent goes to the box's queue in the real broker; `box_worker`
takes it off there and runs it in the test's process, as that box's worker would."""

import base64
import json
from contextlib import contextmanager

import redis
from celery import current_app
from django.conf import settings
from django.test import TestCase

from dashboard.clock import db_now
from dashboard.models import Host


def worker_reported(*hosts):
    """HOSTS' workers stored their report now, by the database's clock (`db_now`: on SQLite the
    process's, so a test that travels in time reports at the time it travelled to)."""
    Host.objects.filter(pk__in=[h.pk for h in hosts]).update(last_report_at=db_now())


def broker():
    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


def _task(raw):
    """(task name, args, kwargs) of one message as the broker holds it (Celery's protocol 2)."""
    message = json.loads(raw)
    args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
    return message["headers"]["task"], args, kwargs


def waiting(queue):
    """(task name, args) of each message waiting on QUEUE in the real broker, newest first."""
    return [(name, args) for name, args, _ in map(_task, broker().lrange(queue, 0, -1))]


def take(queue):
    """(task name, args, kwargs) of each message on QUEUE, taken off it oldest first (as a worker's
    BRPOP takes them)."""
    client, taken = broker(), []
    while (raw := client.rpop(queue)) is not None:
        taken.append(_task(raw))
    return taken


@contextmanager
def box_worker(host):
    """HOST's worker, reporting and here: what the block sends to `host.<name>` (once its transaction
    commits) is run in this process when the block ends; `ran` lists (task name, args) in order."""
    broker().delete(host.queue)  # nothing an earlier test left there
    worker_reported(host)
    ran: list[tuple[str, list]] = []
    with TestCase.captureOnCommitCallbacks(execute=True):
        yield ran
    for name, args, kwargs in take(host.queue):
        current_app.tasks[name](*args, **kwargs)
        ran.append((name, args))
