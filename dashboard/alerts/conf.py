"""Alert settings, read from the environment with strict parsing (sparkops/settings.py may override)."""

from django.conf import settings

from sparkops.env import env_number


def _setting(name, default, cast=float, minimum=0):
    if hasattr(settings, name):
        return cast(getattr(settings, name))
    return env_number(name, default, cast=cast, minimum=minimum)


def retry_base_s():
    """First retry delay of a transiently failed delivery; doubles each attempt."""
    return _setting("SPARKOPS_ALERT_RETRY_BASE_S", 2.0, minimum=0.1)


def retry_cap_s():
    """Longest wait between two attempts."""
    return _setting("SPARKOPS_ALERT_RETRY_CAP_S", 600.0, minimum=1)


def retry_for_s():
    """How long transient failures are retried before the delivery is marked failed (≥ 24 h)."""
    return _setting("SPARKOPS_ALERT_RETRY_FOR_S", 26 * 3600.0, minimum=1)


def claim_lease_s():
    """A claimed delivery whose worker died is re-queued after this long."""
    return _setting("SPARKOPS_ALERT_CLAIM_LEASE_S", 30.0, minimum=1)


def renotify_s():
    """Default interval for re-notifying unacknowledged critical alerts."""
    return _setting("SPARKOPS_ALERT_RENOTIFY_S", 3600.0, minimum=10)


def sweep_interval_s():
    """How often the leading worker re-queues due retries and lapsed claims (and checks for stale collectors)."""
    return _setting("SPARKOPS_ALERT_SWEEP_S", 5.0, minimum=0.2)


def http_timeout_s():
    return _setting("SPARKOPS_ALERT_HTTP_TIMEOUT_S", 5.0, minimum=0.1)
