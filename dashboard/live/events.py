"""The one place that pushes live updates to browsers (Channels groups).

Call `publish_on_commit(group, event)` from services: it sends after the transaction
commits, so a browser never sees data the database does not have.

Groups: every page joins `GROUP_OVERVIEW` or the subject groups it shows
(`engine_group(id)`, `host_group(id)`); `GROUP_ALL` reaches every socket. A group is a
routing key, not a permission: what a role may see is decided per event by `min_role`
(drop the event below that role) and `by_role` (payload overrides for a role and up,
e.g. the alert row with its Ack button for operators), applied by the consumer."""
import logging
from dataclasses import asdict, dataclass, field
from typing import TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

GROUP_ALL = "sparkops.all"
GROUP_OVERVIEW = "sparkops.overview"


def engine_group(engine_id):
    return f"engine.{int(engine_id)}"


def host_group(host_id):
    return f"host.{int(host_id)}"


class EngineSamplePayload(TypedDict):
    """"engine.sample": numbers for Plotly's extendTraces, the card pre-rendered."""

    engine: str
    id: int
    status: str
    reason: str
    t: str  # ISO time of the reading (the x of every point below)
    points: dict  # metric -> float (only metrics present in the reading)
    html: str  # the overview card


class HostSamplePayload(TypedDict):
    host: str
    id: int
    t: str
    points: dict  # "psi.memory.some.avg10", "gpu0.sm_clock_mhz", ... -> float
    html: str  # host card followed by its GPU cards


class AlertChangedPayload(TypedDict, total=False):
    id: int
    rule: str
    severity: str
    state: str
    subject: str
    message: str
    html: str


@dataclass
class LiveEvent:
    type: str  # e.g. "engine.sample", "host.sample", "alert.changed", "changelog.entry"
    payload: dict = field(default_factory=dict)
    min_role: str = "viewer"  # sockets of a lower role never receive this event
    by_role: dict = field(default_factory=dict)  # role -> payload keys overriding for that role and up

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
