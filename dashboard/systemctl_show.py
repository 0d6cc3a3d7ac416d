"""`systemctl show` output read back: one parser for the collectors, the controls, the simulator
(its systemctl prints systemd's format, and its state files hold one unit's properties in it) and
the tests that read real or simulated systemctl; with `parse_timestamp`, its timestamps as aware
datetimes (the collectors, the launch accounts, the alert rules and the controls all read them).

systemctl prints one `Key=value` line per property and a blank line between units; a value runs to
the end of its line (systemctl escapes newlines, so no value spans lines) and may be empty or
contain `=`. Lines without `=` (such as `--value` output) carry no key and are skipped.

This module imports nothing of Django or the collectors package: the simulator's systemctl and the
readiness helper start a fresh interpreter for every call and read it too."""

import time
from datetime import UTC, datetime


def show_blocks(text: str) -> list[dict[str, str]]:
    """`systemctl show A B …` → one {property: raw value} per unit, in the order printed."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
            current = {}
            continue
        key, sep, value = line.partition("=")
        if sep:
            current[key] = value
    if current:
        blocks.append(current)
    return blocks


def unit_props(text: str) -> dict[str, str]:
    """The properties of one unit's `systemctl show` in one dict ({} for no output); a key printed
    twice keeps its last value."""
    return {key: value for block in show_blocks(text) for key, value in block.items()}


def parse_timestamp(text: str | None) -> datetime | None:
    """systemd's `Tue 2026-07-14 10:02:11 UTC`, with microseconds (`… 10:02:11.492971 UTC`, what
    `--timestamp=us+utc` prints) or `@1752487331` → aware datetime, or None."""
    if not text:
        return None
    text = text.strip()
    if text.startswith("@"):
        try:
            return datetime.fromtimestamp(float(text[1:]), tz=UTC)
        except ValueError:
            return None
    parts = text.split()
    if len(parts) >= 3 and len(parts[0]) == 3:
        parts = parts[1:]  # the weekday
    try:
        fmt = "%Y-%m-%d %H:%M:%S.%f" if len(parts) > 1 and "." in parts[1] else "%Y-%m-%d %H:%M:%S"
        naive = datetime.strptime(" ".join(parts[:2]), fmt)
    except ValueError:
        return None
    if len(parts) > 2 and parts[2] in ("UTC", "GMT"):
        return naive.replace(tzinfo=UTC)
    local = time.mktime(naive.timetuple()) + naive.microsecond / 1e6  # the box's local time
    return datetime.fromtimestamp(local, tz=UTC)
