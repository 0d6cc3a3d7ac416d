"""Alert settings. sparkops/settings.py parses SPARKOPS_ALERT_* with the rest of the environment
(finite, within bounds, or start-up stops naming the variable); these read the parsed values."""

import time

from django.conf import settings

from sparkops.broker import broker_client


def _setting(name: str) -> float:
    return float(getattr(settings, name))


def retry_base_s() -> float:
    """First retry delay of a transiently failed delivery; doubles each attempt."""
    return _setting("SPARKOPS_ALERT_RETRY_BASE_S")


def retry_cap_s() -> float:
    """Longest wait between two attempts."""
    return _setting("SPARKOPS_ALERT_RETRY_CAP_S")


def retry_for_s() -> float:
    """How long transient failures are retried before the delivery is marked failed (≥ 24 h)."""
    return _setting("SPARKOPS_ALERT_RETRY_FOR_S")


def claim_lease_s() -> float:
    """A claimed delivery whose worker died is re-queued after this long."""
    return _setting("SPARKOPS_ALERT_CLAIM_LEASE_S")


def renotify_s() -> float:
    """Default interval for re-notifying unacknowledged critical alerts."""
    return _setting("SPARKOPS_ALERT_RENOTIFY_S")


def sweep_interval_s() -> float:
    """How often the leading worker re-queues due retries and lapsed claims (and checks for stale collectors)."""
    return _setting("SPARKOPS_ALERT_SWEEP_S")


def http_timeout_s() -> float:
    return _setting("SPARKOPS_ALERT_HTTP_TIMEOUT_S")


def upkeep_runs_key() -> str:
    """Where the leading worker records each upkeep run ("EPOCH BOX DUTY", newest first; see
    poller/lease.UpkeepLease.ran): beat's backstops read it."""
    return f"{settings.SPARKOPS_CHANNEL_PREFIX}:fleet:upkeep:runs"


def leader_ran(duty: str) -> bool:
    """Whether the leading worker ran DUTY within three sweep intervals, by its record in Redis: beat's
    backstop of that duty (every 30 s) then has nothing to catch and leaves the database alone. A
    record that cannot be read, or stamped ahead of this clock, is no proof: the backstop runs."""
    within = 3 * sweep_interval_s()
    try:
        entries = broker_client().lrange(upkeep_runs_key(), 0, 31)
    except Exception:
        return False
    now = time.time()
    for raw in entries:
        text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        at, _, rest = text.partition(" ")
        try:
            age = now - float(at)
        except ValueError:
            continue
        if rest.endswith(f" {duty}") and 0 <= age < within:
            return True
    return False
