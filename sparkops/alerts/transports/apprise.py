"""Chat and push channels through Apprise (Slack, Discord, Telegram, ntfy, Pushover, Matrix,
Teams, Gotify, … each by its URL; https://github.com/caronc/apprise/wiki).

Apprise says only success or failure, so a failure is transient (retried with the outbox's
backoff until SPARKOPS_ALERT_RETRY_FOR_S) unless the URL itself is invalid, which is refused
when the channel is saved and is permanent should one slip through. The reason of a failure
is what Apprise logged while it tried."""

import logging

import apprise

from ..apprise_urls import apprise_url_error, redacted
from ..models import Delivery
from ..payloads import AlertPayload
from .base import Transport, TransportError

NOTIFY_TYPES = {"resolved": apprise.NotifyType.SUCCESS, "test": apprise.NotifyType.INFO}
SEVERITY_TYPES = {"critical": apprise.NotifyType.FAILURE, "warning": apprise.NotifyType.WARNING}


def title_and_body(payload: AlertPayload) -> tuple[str, str]:
    word = {"resolved": "RESOLVED", "test": "TEST"}.get(payload["transition"], payload["severity"].upper())
    title = f"[SparkOps {word}] {payload['rule']} on {payload['subject']}"[:250]
    lines = [payload["message"]]
    if payload.get("resolution"):
        lines.append(f"Resolution: {payload['resolution']}")
    latest = payload.get("latest")
    if latest:
        lines.append(f"Now: {latest['message']}")
    if payload.get("cause"):
        lines.append(f"Cause: {payload['cause']}")
    lines.append(f"Started: {payload['started_at']}")
    if payload.get("resolved_at"):
        lines.append(f"Resolved: {payload['resolved_at']}")
    lines.append(payload["link"])
    return title, "\n".join(lines)


def notify_type(payload: AlertPayload) -> str:
    return NOTIFY_TYPES.get(payload["transition"]) or SEVERITY_TYPES.get(payload["severity"], apprise.NotifyType.INFO)


class AppriseTransport(Transport):
    def send(self, delivery: Delivery) -> None:
        url = self.channel.config.get("url", "")
        problem = apprise_url_error(url)
        if problem:
            raise TransportError(problem, permanent=True)
        notifier = apprise.Apprise()
        notifier.add(url)
        title, body = title_and_body(delivery.payload)
        with apprise.LogCapture(level=logging.WARNING) as said:
            ok = notifier.notify(
                title=title, body=body, notify_type=notify_type(delivery.payload), body_format=apprise.NotifyFormat.TEXT
            )
        if not ok:
            reason = " ".join(line.strip() for line in said.getvalue().splitlines() if line.strip())[-1000:]
            raise TransportError(f"Apprise ({redacted(url)}): not delivered" + (f": {reason}" if reason else ""))
