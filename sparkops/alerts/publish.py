"""Live "alert.changed" events for the live view (sent after commit)."""

from dashboard.livebus import GROUP_ALL, LiveEvent, publish_on_commit
from sparkops.alerts.models import AlertEvent


def alert_changed(event: AlertEvent) -> None:
    """Tell every page that EVENT moved. The event carries the facts, not markup: a page that
    lists alerts fetches its list again over HTTP, rendered for the reader's role."""
    payload = {
        "id": event.pk,
        "rule": event.rule,
        "severity": event.severity,
        "state": event.state,
        "subject": event.subject,
        "message": event.message,
        "cause": event.cause,
        "acknowledged": bool(event.acknowledged_at),
    }
    publish_on_commit(GROUP_ALL, LiveEvent(type="alert.changed", payload=payload))
