"""The unit's state right now, for explaining an engine death the moment it is confirmed.

The host collector's last reading can be a poll old; `systemctl show` on the engine's own
box answers in milliseconds and tells whether systemd will bring the engine back."""
import subprocess

from django.conf import settings

PROPS = "ActiveState,SubState,Result,ExecMainStatus,ExecMainCode,MainPID,NRestarts,Restart,StateChangeTimestamp"


def unit_state_now(engine, *, timeout=1.0):
    """A dict of systemd properties, or None when there is no unit or it cannot be read here."""
    if not engine.unit or engine.host.name != settings.SPARKOPS_HOST_NAME:
        return None
    command = [settings.SPARKOPS_SYSTEMCTL, *(["--user"] if engine.unit_scope == "user" else []),
               "show", engine.unit, "-p", PROPS]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    props = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    return props or None


def unit_of(engine, reading=None):
    reading = reading if reading is not None else (engine.latest or {})
    return reading.get("unit") or None
