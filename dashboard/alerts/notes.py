"""An alert event's timeline: one note per thing that happened to it (pending, firing, a
notification sent or suppressed, an ack, a silence, resolved). The lifecycle, the outbox
and the services all write notes; this module imports only the models, so each can."""

from django.utils import timezone

from .models import AlertNote


def note_add(event, kind, text, *, user=None, at=None):
    return AlertNote.objects.create(event=event, at=at or timezone.now(), kind=kind, text=text, user=user)
