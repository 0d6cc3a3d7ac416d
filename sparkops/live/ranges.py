"""Chart time ranges: the preset buttons and a validated custom range."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypedDict

from django.utils import timezone

PRESETS = {
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
MAX_SPAN = timedelta(days=400)


class RangeDict(TypedDict):
    """A TimeRange as the chart JSON carries it."""

    start: str
    end: str
    key: str


class RangeError(ValueError):
    """A range the user asked for that cannot be drawn; the message says why."""


@dataclass(frozen=True)
class TimeRange:
    start: datetime
    end: datetime
    key: str  # a preset name or "custom"

    def as_dict(self) -> RangeDict:
        return {"start": self.start.isoformat(), "end": self.end.isoformat(), "key": self.key}


def _parse_time(text: str, name: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise RangeError(f"{name} must be an ISO date and time such as 2026-03-01T14:00, not {text!r}.") from None
    return value if timezone.is_aware(value) else timezone.make_aware(value)


def parse_range(params: Mapping[str, str], *, default: str = "1h", now: datetime | None = None) -> TimeRange:
    """From query parameters: `range=<preset>`, or `start` (and optional `end`) as ISO times."""
    now = now or timezone.now()
    if params.get("start"):
        start = _parse_time(params["start"], "start")
        end = _parse_time(params["end"], "end") if params.get("end") else now
        if end <= start:
            raise RangeError("The end of the range must be after its start.")
        if end - start > MAX_SPAN:
            raise RangeError(f"A custom range may span at most {MAX_SPAN.days} days.")
        return TimeRange(start, end, "custom")
    key = params.get("range") or default
    if key not in PRESETS:
        raise RangeError(f"Unknown range {key!r}; choose one of {', '.join(PRESETS)} or give start/end.")
    return TimeRange(now - PRESETS[key], now, key)
