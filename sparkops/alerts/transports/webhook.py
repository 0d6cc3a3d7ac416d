"""JSON webhooks: SparkOps or Alertmanager format, HMAC-signed, with an idempotency key.

Sent through dashboard/http.py, the project's one HTTP choke point (timeouts, size cap, typed errors)."""

import hashlib
import hmac
import json

from dashboard import http

from .. import conf
from ..models import Delivery
from ..payloads import AlertPayload, alertmanager_body
from .base import Transport, TransportError

MAX_REPLY_BYTES = 256 * 1024  # a receiver's answer is only read for the error text


def sign(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookTransport(Transport):
    def body(self, payload: AlertPayload) -> bytes:
        data = alertmanager_body(payload) if self.channel.config.get("format") == "alertmanager" else payload
        return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()

    def headers(self, body: bytes, delivery: Delivery) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Idempotency-Key": delivery.idempotency_key}
        if self.channel.secret:
            headers["X-SparkOps-Signature"] = sign(self.channel.secret, body)
        return headers

    def send(self, delivery: Delivery) -> None:
        body = self.body(delivery.payload)
        url = self.channel.config.get("url", "")
        if not url.startswith(("http://", "https://")):
            raise TransportError(f"bad webhook URL {url!r}", permanent=True)
        try:
            http.post(
                url,
                timeout=conf.http_timeout_s(),
                content=body,
                headers=self.headers(body, delivery),
                max_bytes=MAX_REPLY_BYTES,
            )
        except http.HttpStatus as exc:
            # 3xx (never followed: a moved webhook is a config error) and 4xx (but 408/429) are
            # permanent: the receiver rejects this request as it is.
            raise TransportError(f"{exc}", permanent=exc.permanent) from None
        except (http.TooLarge, http.BadBody):
            return  # the receiver said 2xx; what it wrote back does not matter
        except http.HttpError as exc:
            raise TransportError(f"{exc.kind}: {exc}") from None
