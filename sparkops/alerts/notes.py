"""An alert event's timeline: one note per thing that happened to it (pending, firing, a
notification sent or suppressed, an ack, a silence, resolved). The lifecycle, the outbox
and the services all write notes; this module imports only the models, so each can."""

from datetime import datetime

from django.contrib.auth.models import User
from django.utils import timezone

from .models import AlertEvent, AlertNote


def note_add(
    event: AlertEvent, kind: str, text: str, *, user: User | None = None, at: datetime | None = None
) -> AlertNote:
    return AlertNote.objects.create(event=event, at=at or timezone.now(), kind=kind, text=text, user=user)
