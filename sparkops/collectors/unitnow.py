"""The unit of an engine a probe found down, read at once: its state and its journal since it
last started, so the engine_down rule can say why it is down (and whether systemd brings it
back) the moment the death is confirmed.

The host reading can be a poll old; `systemctl show` and `journalctl` on the engine's own box
answer in milliseconds. Read in the probe step (`poller/liveness.engines_probe`) and carried
by its finding: a rule reads what was collected, it runs no command."""

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings

from dashboard.systemctl_show import parse_timestamp
from sparkops.collectors import asked
from sparkops.collectors.systemd import Entry, UnitEngine, UnitProps, classify, message, unit_journal, units_show

log = logging.getLogger(__name__)
# A CUDA/kernel signature says what killed it; "EngineCore died" only that something did.
GENERIC = {"engine_core_died"}
STARTED_MESSAGE_ID = "39f53479d3a045ac8e11786248231fbf"  # systemd: "Started <unit>"
STOPPING_MESSAGE_ID = "de5b426a63be47a7b6ac3eaac82e2f6f"  # "Stopping <unit>...": a stop job began (JOB_TYPE=stop)
STOPPED_MESSAGE_ID = "9d1aaa27d60140bd96365438aad20286"  # "Stopped <unit>": JOB_TYPE=stop, or restart
RESTART_MESSAGE_ID = "5eb03494b6584870a536b337290809b3"  # "Scheduled restart job, restart counter is at N"
JOB_MESSAGES = {STARTED_MESSAGE_ID, STOPPING_MESSAGE_ID, STOPPED_MESSAGE_ID, RESTART_MESSAGE_ID}
START_LIMIT_TEXT = "Start request repeated too quickly"
JOURNAL_LINES = 40
RUN_MAX_AGE_S = 600


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class HostedEngine(UnitEngine, Protocol):
    """An engine with its box (dashboard.models.Engine): whose unit is read here only on that box."""

    @property
    def host(self) -> _Named: ...


@dataclass
class Job:
    """What systemd's own journal says began or ended the unit's current run: a stop job someone
    asked for (`systemctl stop`/`restart`, the Restart button, `unit fix --apply`, `launch`), or a
    restart systemd made itself (Restart=). Read from the manager's job messages, never guessed
    from timing: a stop and an exit 0 leave the same `systemctl show`."""

    op: str  # "stop": a requested stop ended the run; "restart": the run began (or is to begin) after one
    at: float  # when systemd logged it (wall seconds)
    requested: bool  # asked of systemd (True) or systemd's own Restart= (False)
    pending: bool = False  # a restart whose stop half is done and whose start has not yet said "Started"
    by: str = ""  # who asked, where this process asked it (collectors/asked.py): "ada (the Restart button)"

    @property
    def when(self) -> str:
        return time.strftime("%H:%M:%S", time.localtime(self.at))

    @property
    def text(self) -> str:
        if not self.requested:
            return f"Restart= by systemd, {self.when}"
        return self.asked_text(self.op)

    def asked_text(self, op: str) -> str:
        """ "systemctl OP[ by WHO], HH:MM:SS": this job as one asked of systemd."""
        return f"systemctl {op}{' by ' + self.by if self.by else ''}, {self.when}"


@dataclass
class UnitNow:
    """What the engine's unit said when the probe's finding was made."""

    props: UnitProps | None  # `systemctl show` of the unit; None when it could not be read
    fatal_line: str = ""  # the most telling fatal journal line of the process that died (or runs)
    # systemd's "UNIT: Start request repeated too quickly." since then: a crash loop past
    # StartLimitBurst= leaves the unit failed with the last run's Result (exit-code, signal),
    # so this line is the only sign that systemd stopped restarting it.
    start_limit_line: str = ""
    job: Job | None = None  # the job that ended or began the current run, as the journal says

    def of(self, unit: str) -> "UnitNow":
        """This, its job naming who asked for it where this process did (collectors/asked.py)."""
        if self.job is not None and self.job.requested and not self.job.by and unit:
            self.job.by = asked.who(unit, self.job.at)
        return self


def is_local(engine: HostedEngine) -> bool:
    """Whether ENGINE's unit can be read here (it has one, on this worker's box)."""
    return bool(engine.unit) and engine.host.name == settings.SPARKOPS_HOST_NAME


def unit_now(engine: HostedEngine) -> UnitNow | None:
    """ENGINE's unit read now (one `systemctl show`, one `journalctl`), or None when it has no
    unit on this box. A command that fails reads as unknown, never as an error."""
    if not is_local(engine):
        return None
    props = _props(engine)
    return UnitNow(props, *_journal_lines(engine, since=_run_start(props))).of(engine.unit)


def _props(engine: UnitEngine) -> UnitProps | None:
    try:
        props = units_show([engine.unit], scope=engine.unit_scope).get(engine.unit) or {}
    except Exception as exc:  # a missing systemctl is "unknown"
        log.debug("systemctl show %s failed: %s", engine.unit, exc)
        return None
    return None if "error" in props or not props.get("ActiveState") else props


def _journal_lines(engine: UnitEngine, *, since: float | None = None) -> tuple[str, str, Job | None]:
    """(the most telling fatal line, the start-limit line, the Job) of the unit's current run: ''
    and None when none. A fatal line belongs to its process: with SINCE (its start, wall seconds)
    only lines logged since then are read, so a line of an earlier run (still "since the last
    Started" while a restarted unit's gate runs) never explains this death."""
    try:
        entries = unit_journal(engine.unit, scope=engine.unit_scope, first_lines=JOURNAL_LINES)
    except Exception as exc:
        log.debug("journalctl for %s failed: %s", engine.unit, exc)
        return "", "", None
    job = job_of(entries)
    if since is None:
        run = _this_run(entries)
    else:  # the process's own lines, whatever run started after it
        run = [e for e in entries if _int(e.get("__REALTIME_TIMESTAMP")) >= since * 1e6]
    found = [(sig, message(e)) for e in run for sig in [classify(e)[0]] if sig]
    specific = [text for sig, text in found if sig not in GENERIC]
    fatal = ((specific or [text for _, text in found]) or [""])[-1][:500]
    limits = [message(e) for e in run if START_LIMIT_TEXT in str(message(e))]
    return fatal, (limits[-1][:500] if limits else ""), job


def job_of(entries: Sequence[Entry]) -> Job | None:
    """The job that ended the unit's last run or began its current one, from the manager's
    messages among ENTRIES (oldest first). After the last "Started": a "Stopping" is a requested
    stop ("stop"), or the stop half of a requested restart ("restart", pending: its "Stopped"
    says JOB_TYPE=restart, and a start follows that may yet fail). Before it, since the "Started"
    before that: a "Stopping" (this run began on request: "restart") or systemd's "Scheduled
    restart job" (Restart= brought it back)."""
    marks = [(e.get("MESSAGE_ID"), e) for e in entries if e.get("MESSAGE_ID") in JOB_MESSAGES]
    started = [i for i, (mid, _) in enumerate(marks) if mid == STARTED_MESSAGE_ID]
    last = started[-1] if started else -1
    after = marks[last + 1 :]
    stopping = [e for mid, e in after if mid == STOPPING_MESSAGE_ID]
    if stopping:
        restart = any(mid == STOPPED_MESSAGE_ID and e.get("JOB_TYPE") == "restart" for mid, e in after)
        return Job("restart" if restart else "stop", _at(stopping[-1]), True, pending=restart)
    if last < 0:
        return None
    before = marks[(started[-2] + 1 if len(started) > 1 else 0) : last]
    auto = [e for mid, e in before if mid == RESTART_MESSAGE_ID]
    if auto:
        return Job("restart", _at(auto[-1]), False)
    asked = [e for mid, e in before if mid == STOPPING_MESSAGE_ID]
    return Job("restart", _at(asked[-1]), True) if asked else None


def _at(entry: Mapping[str, Any]) -> float:
    return _int(entry.get("__REALTIME_TIMESTAMP")) / 1e6


def _run_start(props: Mapping[str, Any] | None) -> float | None:
    """When the unit's current (or last) main process started, wall seconds; None when unknown."""
    began = parse_timestamp((props or {}).get("ExecMainStartTimestamp") or "")
    return began.timestamp() if began is not None else None


def _this_run(entries: list[Entry], max_age_s: float = RUN_MAX_AGE_S) -> list[Entry]:
    """Entries since the unit last started (systemd's "Started" message) and not older than MAX_AGE_S:
    an earlier death's CUDA error must not explain this one."""
    started = [i for i, e in enumerate(entries) if e.get("MESSAGE_ID") == STARTED_MESSAGE_ID]
    entries = entries[started[-1] + 1 :] if started else entries
    oldest_us = (time.time() - max_age_s) * 1e6
    return [e for e in entries if _int(e.get("__REALTIME_TIMESTAMP")) >= oldest_us]


def _int(value: str | int | None) -> int:
    if value is None:
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
