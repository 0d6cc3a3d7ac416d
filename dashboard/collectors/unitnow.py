"""The unit of an engine a probe found down, read at once: its state and its journal since it
last started, so the engine_down rule can say why it is down (and whether systemd brings it
back) the moment the death is confirmed.

The host reading can be a poll old; `systemctl show` and `journalctl` on the engine's own box
answer in milliseconds. Read in the probe step (`poller/liveness.engines_probe`) and carried
by its finding: a rule reads what was collected, it runs no command."""

import logging
import time
from dataclasses import dataclass

from django.conf import settings

from dashboard.collectors.systemd import classify, journal_read, message, units_show

log = logging.getLogger(__name__)
# A CUDA/kernel signature says what killed it; "EngineCore died" only that something did.
GENERIC = {"engine_core_died"}
STARTED_MESSAGE_ID = "39f53479d3a045ac8e11786248231fbf"  # systemd: "Started <unit>"
START_LIMIT_TEXT = "Start request repeated too quickly"
JOURNAL_LINES = 40
RUN_MAX_AGE_S = 600


@dataclass
class UnitNow:
    """What the engine's unit said when the probe's finding was made."""

    props: dict | None  # `systemctl show` of the unit; None when it could not be read
    fatal_line: str = ""  # the most telling fatal journal line since the unit last started
    # systemd's "UNIT: Start request repeated too quickly." since then: a crash loop past
    # StartLimitBurst= leaves the unit failed with the last run's Result (exit-code, signal),
    # so this line is the only sign that systemd stopped restarting it.
    start_limit_line: str = ""


def is_local(engine):
    """Whether ENGINE's unit can be read here (it has one, on this worker's box)."""
    return bool(engine.unit) and engine.host.name == settings.SPARKOPS_HOST_NAME


def unit_now(engine):
    """ENGINE's unit read now (one `systemctl show`, one `journalctl`), or None when it has no
    unit on this box. A command that fails reads as unknown, never as an error."""
    if not is_local(engine):
        return None
    return UnitNow(_props(engine), *_journal_lines(engine))


def _props(engine):
    try:
        props = units_show([engine.unit], scope=engine.unit_scope).get(engine.unit) or {}
    except Exception as exc:  # a missing systemctl is "unknown"
        log.debug("systemctl show %s failed: %s", engine.unit, exc)
        return None
    return None if "error" in props or not props.get("ActiveState") else props


def _journal_lines(engine):
    """(the most telling fatal line, the start-limit line) of the unit's current run ('' each when none)."""
    try:
        which = {"user_units": [engine.unit]} if engine.unit_scope == "user" else {"units": [engine.unit]}
        entries, _ = journal_read(**which, first_lines=JOURNAL_LINES)
    except Exception as exc:
        log.debug("journalctl for %s failed: %s", engine.unit, exc)
        return "", ""
    run = _this_run(entries)
    found = [(sig, message(e)) for e in run for sig in [classify(e)[0]] if sig]
    specific = [text for sig, text in found if sig not in GENERIC]
    fatal = ((specific or [text for _, text in found]) or [""])[-1][:500]
    limits = [message(e) for e in run if START_LIMIT_TEXT in str(message(e))]
    return fatal, (limits[-1][:500] if limits else "")


def _this_run(entries, max_age_s=RUN_MAX_AGE_S):
    """Entries since the unit last started (systemd's "Started" message) and not older than MAX_AGE_S:
    an earlier death's CUDA error must not explain this one."""
    started = [i for i, e in enumerate(entries) if e.get("MESSAGE_ID") == STARTED_MESSAGE_ID]
    entries = entries[started[-1] + 1 :] if started else entries
    oldest_us = (time.time() - max_age_s) * 1e6
    return [e for e in entries if _int(e.get("__REALTIME_TIMESTAMP")) >= oldest_us]


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
