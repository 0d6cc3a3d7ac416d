"""One transport class per channel kind, looked up in a registry (healthchecks' transports, split)."""

from ..models import NotificationChannel
from .apprise import AppriseTransport
from .base import Transport, TransportError
from .email import EmailTransport
from .webhook import WebhookTransport

REGISTRY: dict[str, type[Transport]] = {
    "email": EmailTransport,
    "webhook": WebhookTransport,
    "apprise": AppriseTransport,
}


def transport_for(channel: NotificationChannel) -> Transport:
    try:
        return REGISTRY[channel.kind](channel)
    except KeyError:
        raise TransportError(f"no transport for channel kind {channel.kind!r}", permanent=True) from None


__all__ = ["REGISTRY", "Transport", "TransportError", "transport_for"]
