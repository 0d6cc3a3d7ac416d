"""Email through Django's mail framework: a plain-text body and an HTML alternative."""

import smtplib

from django.core.mail import EmailMultiAlternatives
from django.template.loader import render_to_string

from ..models import Delivery
from ..payloads import AlertPayload
from .base import Transport, TransportError


class EmailTransport(Transport):
    def subject(self, payload: AlertPayload) -> str:
        word = {"resolved": "RESOLVED", "test": "TEST"}.get(payload["transition"], payload["severity"].upper())
        return f"[SparkOps {word}] {payload['rule']} on {payload['subject']}"[:250]

    def message(self, delivery: Delivery) -> EmailMultiAlternatives:
        payload = delivery.payload
        context = {"p": payload, "key": delivery.idempotency_key}
        text = render_to_string("alerts/email.txt", context)
        msg = EmailMultiAlternatives(
            self.subject(payload),
            text,
            to=[self.channel.config.get("address", "")],
            headers={
                "X-SparkOps-Idempotency-Key": delivery.idempotency_key,
                "Message-ID": f"<{delivery.idempotency_key}@sparkops>",
            },
        )
        msg.attach_alternative(render_to_string("alerts/email.html", context), "text/html")
        return msg

    def send(self, delivery: Delivery) -> None:
        try:
            self.message(delivery).send(fail_silently=False)
        except smtplib.SMTPRecipientsRefused as exc:
            # Greylisting and full mailboxes answer RCPT with 4xx: only 5xx for every recipient is final.
            codes = [code for code, _ in exc.recipients.values()]
            raise TransportError(
                f"recipient refused: {exc.recipients}", permanent=all(c >= 500 for c in codes)
            ) from None
        except smtplib.SMTPResponseException as exc:
            # 5xx SMTP replies are permanent, 4xx are "try again later".
            raise TransportError(f"SMTP {exc.smtp_code}: {exc.smtp_error!r}", permanent=exc.smtp_code >= 500) from None
        except (smtplib.SMTPException, OSError) as exc:  # OSError covers refused and timed-out sockets
            raise TransportError(f"SMTP: {exc or type(exc).__name__}") from None
