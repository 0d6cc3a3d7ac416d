"""A readiness gate's outcome, onto the start it belongs to (the restart budget's EngineStart rows).

It sits in launch/ beside `starts`, its one caller, and reads the gate's lines with the gate's own
parser (sparkops/gate/readiness.py), below both launch/ and the controls.

The gate (`sparkops wait-ready` in the unit's ExecStartPost=) prints its verdict as its last line
(readiness.READY / DIED / BUDGET); under systemd that is the unit's journal. The box's worker,
which measures every start anyway (sparkops/launch/starts.StartTracker), reads the line back when the start
ends: from the unit's own journal, written since the start began, naming the start's main pid, and
from the lines of the unit's last ExecStartPost= runs that journald credited to no unit (a gate that
refuses at once can exit before journald reads its line: systemd.journal_pid_read).

Why the journal and not a report from the gate to SparkOps: the gate then needs nothing but its
stdout. A unit's environment holds no database URL or API token, the app may not be up while the
box boots (exactly when gates run), and a report that fails would lose the verdict, while the
journal keeps it (with the unit, the invocation and the time) whatever else is down; the worker
already reads that journal for fatal lines. A start that never served (the gate gave up, the
process died) gets its row too, with no healthy answer, so failed starts are counted, not lost."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from dashboard.models import Engine, EngineStart
from dashboard.systemctl_show import parse_timestamp
from sparkops.collectors import systemd
from sparkops.collectors.command import CommandError
from sparkops.gate.readiness import PREFIX, outcome_of

log = logging.getLogger(__name__)
JOURNAL_LINES = 400  # the unit's last lines: a gate's progress is a line per 10 s at most
SLACK_S = 1.0  # systemd's show timestamps are whole seconds; the journal's are microseconds


def gate_outcome(engine: Engine, *, since: datetime | None, mainpid: int | None = None) -> dict[str, Any] | None:
    """The last outcome line ENGINE's unit's gate wrote at or after SINCE (an aware datetime) for
    main process MAINPID: {gate, elapsed_s, mainpid, line}, or None (no gate, or not read)."""
    if not engine.unit:
        return None
    try:
        entries = systemd.unit_journal(engine.unit, scope=engine.unit_scope, first_lines=JOURNAL_LINES)
    except CommandError as exc:
        log.info("journal of %s not read for its gate: %s", engine.unit, exc)
        return None
    entries += _unclaimed_gate_lines(engine, {e.get("__CURSOR") for e in entries})
    entries.sort(key=_realtime)
    floor = since.timestamp() - SLACK_S if since else None
    found = None
    for entry in entries:
        text = systemd.message(entry)
        if not text.startswith(PREFIX):
            continue
        outcome = outcome_of(text)
        if outcome is None:
            continue
        at = _realtime(entry) / 1e6
        if floor is not None and at < floor:
            continue
        if mainpid and outcome["mainpid"] and outcome["mainpid"] != mainpid:
            continue
        found = outcome
    return found


def _realtime(entry: Mapping[str, Any]) -> int:
    try:
        return int(entry.get("__REALTIME_TIMESTAMP") or 0)
    except (TypeError, ValueError):
        return 0


def _unclaimed_gate_lines(engine: Engine, seen: Collection[object]) -> list[dict[str, Any]]:
    """The lines of the unit's last ExecStartPost= runs that its unit read did not return: a gate
    that refuses at once prints one line and exits, and journald may then credit the line to no
    unit (systemd.journal_pid_read). Nothing where they cannot be read."""
    try:
        pids = systemd.start_post_pids(engine.unit, scope=engine.unit_scope)
        extra = systemd.journal_pid_read(pids, first_lines=JOURNAL_LINES)
    except CommandError as exc:
        log.info("gate lines of %s not read by pid: %s", engine.unit, exc)
        return []
    return [e for e in extra if e.get("__CURSOR") not in seen]


def attach(start: EngineStart, engine: Engine, *, since: datetime | None, mainpid: int | None = None) -> EngineStart:
    """Write the gate's outcome onto START (an EngineStart row) when its journal has one."""
    outcome = gate_outcome(engine, since=since, mainpid=mainpid)
    if outcome is None:
        return start
    start.gate, start.gate_s, start.gate_line = outcome["gate"], outcome["elapsed_s"], outcome["line"]
    start.save(update_fields=["gate", "gate_s", "gate_line"])
    return start


def record_failed_start(engine: Engine, pending: Mapping[str, Any], *, kind: str) -> EngineStart | None:
    """A start that ended without a healthy answer (the unit failed or started again): its row,
    with no healthy_at, and what its gate said."""
    began = parse_timestamp(pending.get("inactive_exit")) or parse_timestamp(pending.get("stamp"))
    stamp = parse_timestamp(pending.get("stamp"))
    if began is None or (stamp is not None and began > stamp):
        began = stamp
    if began is None:
        return None
    active = parse_timestamp(pending.get("active"))
    start = EngineStart.objects.create(
        engine=engine,
        started_at=began,
        active_at=active if active and active >= began else None,
        healthy_at=None,
        kind=kind,
        compilers_max=pending.get("compilers") or 0,
    )
    return attach(start, engine, since=began, mainpid=pending.get("pid"))
