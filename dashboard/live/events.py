"""The one place that pushes live updates to browsers (Channels groups).

Call `publish_on_commit(group, event)` from services: it sends after the transaction
commits, so a browser never sees data the database does not have."""
import logging
from dataclasses import asdict, dataclass, field

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

GROUP_ALL = "sparkops.all"


@dataclass
class LiveEvent:
    type: str  # e.g. "engine.sample", "host.sample", "alert.changed", "changelog.entry"
    payload: dict = field(default_factory=dict)

    def as_message(self):
        return {"type": "live.event", "event": asdict(self)}


def publish(group, event: LiveEvent):
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, event.as_message())
    except Exception as exc:  # Redis down must never fail a poll; the page shows "stale".
        log.warning("live publish to %s failed: %s", group, exc)


def publish_on_commit(group, event: LiveEvent):
    transaction.on_commit(lambda: publish(group, event))
