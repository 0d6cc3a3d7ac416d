"""The unit's state and fatal journal lines right now, for explaining a death the moment it is confirmed.

The host collector's last reading can be a poll old; `systemctl show` and `journalctl` on the
engine's own box answer in milliseconds and tell whether systemd will bring the engine back.
Both go through the collectors' systemd module (dashboard/collectors/systemd.py)."""

import logging

from django.conf import settings

log = logging.getLogger(__name__)
# A CUDA/kernel signature says what killed it; "EngineCore died" only that something did.
GENERIC = {"engine_core_died"}
STARTED_MESSAGE_ID = "39f53479d3a045ac8e11786248231fbf"  # systemd: "Started <unit>"


def _local(engine):
    return bool(engine.unit) and engine.host.name == settings.SPARKOPS_HOST_NAME


def unit_state_now(engine):
    """systemd properties of the engine's unit, or None when there is none or it cannot be read here."""
    if not _local(engine):
        return None
    try:
        from dashboard.collectors.systemd import units_show

        props = units_show([engine.unit], scope=engine.unit_scope).get(engine.unit) or {}
    except Exception as exc:  # a missing systemctl is "unknown", never a failed evaluation
        log.debug("systemctl show %s failed: %s", engine.unit, exc)
        return None
    return None if "error" in props or not props.get("ActiveState") else props


def fatal_line_now(engine, *, lines=40):
    """The most telling recent fatal journal line of the unit ('' when none)."""
    if not _local(engine):
        return ""
    try:
        from dashboard.collectors.systemd import classify, journal_read, message

        which = {"user_units": [engine.unit]} if engine.unit_scope == "user" else {"units": [engine.unit]}
        entries, _ = journal_read(**which, first_lines=lines)
    except Exception as exc:
        log.debug("journalctl for %s failed: %s", engine.unit, exc)
        return ""
    found = [(sig, message(e)) for e in _this_run(entries) for sig in [classify(e)[0]] if sig]
    specific = [text for sig, text in found if sig not in GENERIC]
    return ((specific or [text for _, text in found]) or [""])[-1][:500]


START_LIMIT_TEXT = "Start request repeated too quickly"


def start_limit_line_now(engine, *, lines=40):
    """systemd's "UNIT: Start request repeated too quickly." for the unit since it last started ('' when
    none): a crash loop past StartLimitBurst= leaves the unit failed with the last run's Result
    (exit-code, signal), so this line is the only sign that systemd stopped restarting it."""
    if not _local(engine):
        return ""
    try:
        from dashboard.collectors.systemd import journal_read, message

        which = {"user_units": [engine.unit]} if engine.unit_scope == "user" else {"units": [engine.unit]}
        entries, _ = journal_read(**which, first_lines=lines)
    except Exception as exc:
        log.debug("journalctl for %s failed: %s", engine.unit, exc)
        return ""
    found = [message(e) for e in _this_run(entries) if START_LIMIT_TEXT in str(message(e))]
    return found[-1][:500] if found else ""


def _this_run(entries, max_age_s=600):
    """Entries since the unit last started (systemd's "Started" message) and not older than MAX_AGE_S:
    an earlier death's CUDA error must not explain this one."""
    import time

    started = [i for i, e in enumerate(entries) if e.get("MESSAGE_ID") == STARTED_MESSAGE_ID]
    entries = entries[started[-1] + 1 :] if started else entries
    oldest_us = (time.time() - max_age_s) * 1e6
    return [e for e in entries if _int(e.get("__REALTIME_TIMESTAMP")) >= oldest_us]


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def unit_of(engine, reading=None):
    reading = reading if reading is not None else (engine.latest or {})
    return reading.get("unit") or None
