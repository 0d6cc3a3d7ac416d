"""Alert settings. sparkops/settings.py parses SPARKOPS_ALERT_* with the rest of the environment
(finite, within bounds, or start-up stops naming the variable); these read the parsed values."""

from django.conf import settings


def _setting(name):
    return float(getattr(settings, name))


def retry_base_s():
    """First retry delay of a transiently failed delivery; doubles each attempt."""
    return _setting("SPARKOPS_ALERT_RETRY_BASE_S")


def retry_cap_s():
    """Longest wait between two attempts."""
    return _setting("SPARKOPS_ALERT_RETRY_CAP_S")


def retry_for_s():
    """How long transient failures are retried before the delivery is marked failed (≥ 24 h)."""
    return _setting("SPARKOPS_ALERT_RETRY_FOR_S")


def claim_lease_s():
    """A claimed delivery whose worker died is re-queued after this long."""
    return _setting("SPARKOPS_ALERT_CLAIM_LEASE_S")


def renotify_s():
    """Default interval for re-notifying unacknowledged critical alerts."""
    return _setting("SPARKOPS_ALERT_RENOTIFY_S")


def sweep_interval_s():
    """How often the leading worker re-queues due retries and lapsed claims (and checks for stale collectors)."""
    return _setting("SPARKOPS_ALERT_SWEEP_S")


def http_timeout_s():
    return _setting("SPARKOPS_ALERT_HTTP_TIMEOUT_S")
