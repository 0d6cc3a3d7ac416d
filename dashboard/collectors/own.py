"""SparkOps's own requests to each engine: how many it sent and how each finished.

Every request SparkOps makes to an engine's API (benchmark runs and their warm-ups, sweeps,
rate runs, A/B pairs, quality and contract probes) goes through one client
(`dashboard.benchmarks.client.stream_chat`), which counts it here when it ends: a Redis hash
per engine server (`<prefix>:own:<host:port>`), one cumulative counter per finish reason
("_other" when the request ended without one, e.g. a refused connection or a timeout). The
live request contract (dashboard/collectors/contract.py) snapshots these counters beside the
engine's own `vllm:request_success_total` at each poll and subtracts them over its window,
so its rules judge the operator's traffic only.

Counting never fails a request: Redis unreachable is logged, and the reading then says it
cannot tell (`counts` answers {"_error": ...})."""

from __future__ import annotations

import logging
import threading
from urllib.parse import urlsplit

from django.conf import settings

log = logging.getLogger(__name__)
REASONS = ("stop", "length", "abort", "error", "repetition")
OTHER = "_other"
ERROR = "_error"
_clients: dict[str, object] = {}
_lock = threading.Lock()


def server_key(url):
    """'host:port' of an engine URL (its API or any path under it), the engine's identity here."""
    parts = urlsplit(url or "")
    host = (parts.hostname or "").lower()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{host}:{port}"


def _key(url):
    return f"{settings.SPARKOPS_CHANNEL_PREFIX}:own:{server_key(url)}"


def _client():
    url = settings.CELERY_BROKER_URL
    with _lock:
        client = _clients.get(url)
        if client is None:
            import redis

            client = _clients[url] = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
    return client


def record(url, finish_reason):
    """Count one of SparkOps's own requests to the engine at URL, ended with FINISH_REASON (None: without one)."""
    field = finish_reason if finish_reason in REASONS else OTHER
    try:
        _client().hincrby(_key(url), field, 1)
    except Exception as exc:  # a benchmark never fails for its bookkeeping
        log.warning("SparkOps's own request to %s not counted: %s", server_key(url), exc)


def counts(url):
    """{reason: cumulative count} of SparkOps's own requests to the engine at URL ({"_error": why}
    when they cannot be read)."""
    try:
        raw = _client().hgetall(_key(url))
    except Exception as exc:
        return {ERROR: f"SparkOps's own requests cannot be read ({type(exc).__name__}: {exc})"[:300]}
    return {k.decode(): float(v) for k, v in raw.items()}
