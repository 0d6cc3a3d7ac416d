"""This process's kept client of the broker's Redis (settings.CELERY_BROKER_URL): one per URL, its
connection pool reconnecting after a failure, 1 s timeouts so that no caller waits on a Redis that
is gone. For the small reads and writes beside Celery's own traffic (SparkOps's own-request counts,
beat's look at the leader's upkeep record): a new connection for each was 4 % of the worker's CPU."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    import redis

_clients: dict[str, redis.Redis] = {}
_lock = threading.Lock()


def broker_client() -> redis.Redis:
    url = settings.CELERY_BROKER_URL
    with _lock:
        client = _clients.get(url)
        if client is None:
            import redis

            client = _clients[url] = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
        return client
