"""The local inbox: a webhook receiver inside SparkOps itself, so a notification can be watched
arriving without any receiver outside.

`sparkops up --demo` adds a signed webhook channel, `demo-inbox`, that points at this stack's
own `/alerts/inbox/receive/`; every notification the outbox sends it lands here and shows on
`/alerts/inbox/` as it arrives. It is a real receiver on the real path (the outbox, the webhook
transport, HMAC signing, idempotency keys, retries), so what a newcomer watches is what a
production channel gets. Anyone may add such a channel: `--webhook http://HOST:PORT/alerts/inbox/receive/`
with a secret.

Only signed deliveries are kept: the signature must match the secret of a webhook channel whose
URL names this path. The inbox keeps the newest KEEP messages."""

import hmac
import json
import secrets
from typing import TypedDict
from urllib.parse import urlsplit

from django.db import IntegrityError, transaction

from dashboard.livebus import GROUP_ALL, LiveEvent, publish_on_commit

from .models import InboxMessage, NotificationChannel
from .transports.webhook import sign

RECEIVE_PATH = "/alerts/inbox/receive/"
DEMO_CHANNEL = "demo-inbox"
MAX_BODY_BYTES = 64 * 1024  # a SparkOps payload is a few kB
KEEP = 500


class Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def inbox_receive(*, body: bytes, signature: str, idempotency_key: str) -> tuple[InboxMessage, bool]:
    """Store one delivery; returns (message, created). Raises Refused(status, reason)."""
    if len(body) > MAX_BODY_BYTES:
        raise Refused(413, f"body over {MAX_BODY_BYTES} bytes")
    channel = _signer(body, signature)
    if channel is None:
        raise Refused(403, "no X-SparkOps-Signature matching a webhook channel that points at this inbox")
    try:
        data = json.loads(body)
    except ValueError:
        raise Refused(400, "the body is not JSON") from None
    key = idempotency_key[:200]
    if key and (seen := InboxMessage.objects.filter(idempotency_key=key).first()):
        return seen, False
    try:
        with transaction.atomic():
            message = InboxMessage.objects.create(channel=channel, idempotency_key=key, body=data)
    except IntegrityError:  # the same delivery, retried while the first was being stored
        return InboxMessage.objects.get(idempotency_key=key), False
    _prune()
    publish_on_commit(GROUP_ALL, LiveEvent(type="inbox.received", payload={"id": message.pk}))
    return message, True


def _signer(body: bytes, signature: str) -> NotificationChannel | None:
    if not signature:
        return None
    for channel in NotificationChannel.objects.filter(kind=NotificationChannel.Kind.WEBHOOK).exclude(secret=""):
        if urlsplit(channel.config.get("url", "")).path == RECEIVE_PATH and hmac.compare_digest(
            sign(channel.secret, body), signature
        ):
            return channel
    return None


def _prune() -> None:
    stale = InboxMessage.objects.order_by("-received_at", "-id").values_list("pk", flat=True)[KEEP:]
    InboxMessage.objects.filter(pk__in=list(stale)).delete()


def demo_inbox_channel(*, base_url: str) -> tuple[NotificationChannel, bool]:
    """The demo's local channel (created once; its URL follows the port `up` serves on).
    Returns (channel, created)."""
    url = base_url.rstrip("/") + RECEIVE_PATH
    channel = NotificationChannel.objects.filter(name=DEMO_CHANNEL).first()
    if channel is None:
        channel = NotificationChannel.objects.create(
            name=DEMO_CHANNEL,
            kind=NotificationChannel.Kind.WEBHOOK,
            config={"url": url, "format": "sparkops"},
            secret=secrets.token_hex(16),
        )
        return channel, True
    if channel.kind == NotificationChannel.Kind.WEBHOOK and channel.config.get("url") != url:
        channel.config = {**channel.config, "url": url}
        channel.save(update_fields=["config"])
    return channel, False


class InboxRow(TypedDict):
    """One message as the inbox page shows it."""

    message: InboxMessage
    transition: str
    title: str
    text: str
    pretty: str


def inbox_rows(limit: int = 100) -> list[InboxRow]:
    """The newest messages as the inbox page shows them."""
    rows: list[InboxRow] = []
    for m in InboxMessage.objects.select_related("channel")[:limit]:
        body = m.body if isinstance(m.body, dict) else {}
        rows.append(
            {
                "message": m,
                "transition": body.get("transition", ""),
                "title": f"{body.get('rule', '?')} on {body.get('subject', '?')}",
                "text": body.get("message", ""),
                "pretty": json.dumps(m.body, indent=2, sort_keys=True),
            }
        )
    return rows
