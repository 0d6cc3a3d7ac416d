"""`systemctl show` output read back: one parser for the collectors, the controls, the simulator
(its systemctl prints systemd's format, and its state files hold one unit's properties in it) and
the tests that read real or simulated systemctl.

systemctl prints one `Key=value` line per property and a blank line between units; a value runs to
the end of its line (systemctl escapes newlines, so no value spans lines) and may be empty or
contain `=`. Lines without `=` (such as `--value` output) carry no key and are skipped.

This module imports nothing of Django or the collectors package: the simulator's systemctl and the
readiness helper start a fresh interpreter for every call and read it too."""


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
