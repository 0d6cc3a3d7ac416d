"""What an alert says now, for the pages that show one: its newest cause (the timeline's last "cause
now …", which "Now" shows too) rather than the one it fired with, and a short excerpt of a long
message that keeps the part an operator reads it for: the fatal line itself."""

from typing import Any

from django import template

register = template.Library()

FATAL = " Last fatal line: "
HEAD_CHARS, LINE_CHARS = 110, 200


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


@register.filter
def cause_now(event: Any) -> str:
    """The newest cause: the one a later finding brought (details["latest"]), else the one it fired with."""
    latest = (getattr(event, "details", None) or {}).get("latest") or {}
    return latest.get("cause") or getattr(event, "cause", "") or ""


@register.filter
def fired_cause(event: Any) -> str:
    """The cause the alert fired with, when a later finding changed it ("" when it is still the same)."""
    first = getattr(event, "cause", "") or ""
    return first if first and first != cause_now(event) else ""


@register.filter
def excerpt(message: str) -> dict[str, str]:
    """{"text", "fatal"}: a message short enough for a card. A "Last fatal line: …" is kept whole up
    to LINE_CHARS (the sentence before it gives way first), since it is what the card is read for."""
    message = message or ""
    head, sep, line = message.partition(FATAL)
    if not sep:
        return {"text": _clip(message, HEAD_CHARS + LINE_CHARS), "fatal": ""}
    return {"text": _clip(head, HEAD_CHARS), "fatal": _clip(line.strip(), LINE_CHARS)}
