"""What a rule reports: one Finding per subject it looked at. Its own module, below the rules that
make findings (alerts/rules/, alerts/custom.py) and the lifecycle that turns them into events
(alerts/lifecycle.py `alert_observe`)."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dashboard.models import Engine, Host


@dataclass
class Finding:
    """What a rule saw for one subject. active=False resolves any open event of that subject."""

    subject: str
    active: bool
    engine: Engine | None = None
    host: Host | None = None
    cause: str = ""
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    severity: str | None = None
    for_s: float | None = None  # None: the rule's configured duration
    fire_now: bool = False  # the rule itself decided the condition is confirmed
    # A definitive cause (systemd will not bring it back) learned after firing is worth a second page, once.
    renotify_on_cause: bool = False
    # When the condition was seen (this process's clock): the reading's time, or the first of an
    # unbroken run of failed probes. A new event starts then, not when it could be written
    # (a database outage may lie in between). None: now.
    observed_at: datetime | None = None
    # An inactive finding may say how the condition ended: RESOLUTION what happened ("up again"),
    # RESOLVED_BY who or what did it ("restarted by systemd (NRestarts 0 → 1)").
    resolution: str = ""
    resolved_by: str = ""
