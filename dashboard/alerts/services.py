"""Services for notification channels (the alert engine adds its own modules)."""
from django.core.exceptions import ValidationError

from dashboard.services.fleet import form_errors_text

from .forms import ChannelForm
from .models import NotificationChannel


def channel_create(*, name, kind, address="", url="", secret="", format="sparkops"):
    form = ChannelForm(data={"name": name, "kind": kind, "address": address, "url": url,
                             "secret": secret, "format": format})
    if not form.is_valid():
        raise ValidationError(form_errors_text(form))
    return NotificationChannel.objects.create(name=name, kind=kind, config=form.config(), secret=secret)


def channel_as_dict(channel):
    return {"name": channel.name, "kind": channel.kind, "target": channel.target,
            "signed": bool(channel.secret), "enabled": channel.enabled, "health": channel.health,
            "last_error": channel.last_error}
