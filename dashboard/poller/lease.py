"""One poller per box: the box's lease in Redis (`PollerLease`).

A second worker started for the same host (a scaled compose service, `sparkops up` beside a
hand-started worker) finds the lease taken and polls nothing until the holder is gone, so no
engine is sampled twice. Extra task-only workers: `sparkops worker --no-poller`."""

import contextlib
import logging
import os
import socket
import threading
import time
import uuid

from django.conf import settings

log = logging.getLogger(__name__)


class PollerLease:
    """The right to poll one host, held in Redis by one poller at a time.

    redis-py's `Lock` (SET NX PX with a token; renewal and release by a script that checks the
    token, so only the holder renews or frees it), not blocking, with `thread_local=False`: the
    probe and metrics threads share one lease. Renewed every `RENEW_S` for `TTL_S`, so a poller
    that dies frees the box within TTL_S. The token names the holder (host:pid:random), which the
    warning of a second poller shows. Redis unreachable: poll anyway (a box polled twice for a
    while is better than a box not watched)."""

    TTL_S, RENEW_S = 15.0, 5.0

    def __init__(self, host_name, url=None):
        import redis

        self.key = f"{settings.SPARKOPS_CHANNEL_PREFIX}:poller:{host_name}"
        self.token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.client = redis.Redis.from_url(
            url or settings.CELERY_BROKER_URL, socket_timeout=1.0, socket_connect_timeout=1.0
        )
        self.lock = self.client.lock(self.key, timeout=self.TTL_S, blocking=False, thread_local=False)
        self.held, self.checked_at, self.warned = False, float("-inf"), False
        self._lock = threading.Lock()  # the probe and metrics threads both ask

    def holds(self):
        """Whether this poller may poll now (asks Redis at most every RENEW_S)."""
        with self._lock:
            return self._holds()

    def _holds(self):
        from redis.exceptions import LockError

        now = time.monotonic()
        if now - self.checked_at < self.RENEW_S:
            return self.held
        self.checked_at = now
        try:
            if self.held:
                try:
                    self.held = self.lock.reacquire()  # TTL_S again, if the token is still ours
                except LockError:  # expired, or taken by another poller meanwhile
                    self.held = False
            if not self.held:
                self.held = self.lock.acquire(token=self.token)
                if not self.held and not self.warned:
                    log.warning(
                        "another poller holds %s (%s): this worker polls nothing until it is gone; "
                        "run extra workers with --no-poller",
                        self.key,
                        self.client.get(self.key),
                    )
                    self.warned = True
        except Exception as exc:  # Redis down: fail open
            log.warning("poller lease %s unknown (%s): polling anyway", self.key, exc)
            self.held = True
        return self.held

    def release(self):
        with contextlib.suppress(Exception):  # not ours any more, or Redis gone: it expires on its own
            self.lock.release()
