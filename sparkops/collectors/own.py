"""SparkOps's own requests to each engine: how many it sent and how each finished.

Every request SparkOps makes to an engine's API (benchmark runs and their warm-ups, sweeps,
rate runs, A/B pairs, quality and contract probes) goes through one client
(`sparkops.benchmarks.client.stream_chat`), which counts it here when it ends: a Redis hash
per engine server (`<prefix>:own:<host:port>`), one cumulative counter per finish reason
("_other" when the request ended without one, e.g. a refused connection or a timeout). The
live request contract (sparkops/collectors/contract.py) snapshots these counters beside the
engine's own `vllm:request_success_total` at each poll and subtracts them over its window,
so its rules judge the operator's traffic only.

Counting never fails a request: Redis unreachable is logged, and the reading then says it
cannot tell (`counts` answers {"_error": ...}). They are counted only in the Redis of this
install's stack (its broker: REDIS_URL, or the running `sparkops up`'s, sparkops/install.py);
a command from a shell that knows neither is refused before it sends anything (`refusal`), rather
than counting in a default Redis the stack does not read."""

from __future__ import annotations

import logging
import uuid
from urllib.parse import urlsplit

from django.conf import settings

from sparkops.broker import broker_client

log = logging.getLogger(__name__)
REASONS = ("stop", "length", "abort", "error", "repetition")
OTHER = "_other"
ERROR = "_error"


def server_key(url: str | None) -> str:
    """'host:port' of an engine URL (its API or any path under it), the engine's identity here."""
    parts = urlsplit(url or "")
    host = (parts.hostname or "").lower()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{host}:{port}"


def _key(url: str) -> str:
    return f"{settings.SPARKOPS_CHANNEL_PREFIX}:own:{server_key(url)}"


def refusal() -> str | None:
    """Why SparkOps must not send its own requests to an engine from here (a command run where
    no stack is known), in words for the command line; None when they are counted."""
    if settings.REDIS_URL:
        return None
    return (
        f"no SparkOps stack is running for the install at {settings.VAR_DIR} (no live "
        f"{settings.VAR_DIR / 'stack.json'}, which `sparkops up` writes) and REDIS_URL is not set: this command's "
        "requests to the engine would not be counted as SparkOps's own, and the engine's request-contract alerts "
        "(truncated_answers, ...) would judge them as the operator's. Start the stack (`sparkops up`), run this "
        "from the shell of the install that watches the engine (its SPARKOPS_VAR_DIR), or set REDIS_URL to its Redis."
    )


# In flight: a sorted set per engine server of the requests sent and not yet counted, each scored
# by when it stops counting (Redis's own clock: no process's clock is compared), so a process
# killed mid-request holds nothing for longer than its request's own timeout (each read prunes the
# set: no key expiry, which one request's shorter timeout would cut for all).
_BEGIN = """
local now = redis.call('TIME')
redis.call('ZADD', KEYS[1], tonumber(now[1]) + tonumber(ARGV[2]), ARGV[1])
return 1
"""
_READ = """
local now = redis.call('TIME')
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now[1])
return {redis.call('HGETALL', KEYS[1]), redis.call('ZCARD', KEYS[2])}
"""
IN_FLIGHT = "_in_flight"
FLIGHT_SLACK_S = 60  # past a request's timeout, before it stops counting as in flight


def _flight_key(url: str) -> str:
    return f"{settings.SPARKOPS_CHANNEL_PREFIX}:own-flight:{server_key(url)}"


def begin(url: str, *, timeout_s: float) -> str | None:
    """Say one of SparkOps's own requests to the engine at URL is about to leave (it ends within
    TIMEOUT_S); the token to give `record`. The engine counts a request when it finishes it, a
    moment before the client sees its end: a poll in that moment sees the engine's count and not
    ours, and the request is known to be in flight instead (the contract then counts the operator's
    traffic low by it, never high)."""
    token = uuid.uuid4().hex
    try:
        broker_client().eval(_BEGIN, 1, _flight_key(url), token, int(timeout_s) + FLIGHT_SLACK_S)
    except Exception as exc:  # a benchmark never fails for its bookkeeping
        log.warning("SparkOps's own request to %s not marked in flight: %s", server_key(url), exc)
        return None
    return token


def record(url: str, finish_reason: str | None, token: str | None = None) -> None:
    """Count one of SparkOps's own requests to the engine at URL, ended with FINISH_REASON (None:
    without one); TOKEN (from `begin`) leaves the in-flight set in the same transaction."""
    field = finish_reason if finish_reason in REASONS else OTHER
    try:
        pipe = broker_client().pipeline(transaction=True)
        pipe.hincrby(_key(url), field, 1)
        if token:
            pipe.zrem(_flight_key(url), token)
        pipe.execute()
    except Exception as exc:  # a benchmark never fails for its bookkeeping
        log.warning("SparkOps's own request to %s not counted: %s", server_key(url), exc)


def counts(url: str) -> dict[str, float | str]:
    """{reason: cumulative count} of SparkOps's own requests to the engine at URL, with IN_FLIGHT:
    how many are sent and not yet counted ({"_error": why} when they cannot be read). Read in one
    step, after the engine's scrape: whatever of ours the scrape counted is either counted here or
    in flight."""
    try:
        raw, flying = broker_client().eval(_READ, 2, _key(url), _flight_key(url))
    except Exception as exc:
        return {ERROR: f"SparkOps's own requests cannot be read ({type(exc).__name__}: {exc})"[:300]}
    pairs = dict(zip(raw[::2], raw[1::2], strict=True))
    return {**{k.decode(): float(v) for k, v in pairs.items()}, IN_FLIGHT: float(flying)}
