"""Every start of every engine's unit, measured (`StartTracker`, `record_start`), and the restart
budget read from them: per engine (`restart_budget`) and for a whole box's cold boot
(`box_cold_boot`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from statistics import median
from typing import TYPE_CHECKING, Any, TypedDict

from dashboard.models import Engine, EngineStart
from dashboard.systemctl_show import parse_timestamp
from sparkops.audit.checks import helper_budget_s
from sparkops.collectors import unitconfig

from .gate_journal import attach, record_failed_start
from .snapshot import latest_snapshot

if TYPE_CHECKING:
    from dashboard.models import EngineStart, Host


class StartClass(TypedDict):
    """The served starts of one class (cold or warm): how many, their durations, first and last."""

    n: int
    median: float
    min: float
    max: float
    first: datetime
    last: datetime


class RestartBudget(TypedDict):
    """What `restart_budget` reads from an engine's starts, for its page."""

    starts: list[EngineStart]
    classes: dict[str, StartClass]
    failed: list[EngineStart]
    budget_s: float | None
    timeout_s: float | None


class ColdBoot(TypedDict):
    """A box's full cold boot: the sum, and (engine, its figure, budget, TimeoutStartSec) each."""

    total_s: float
    engines: list[tuple[str, float, float | None, float | None]]


class StartTracker:
    """Every start of every unit, from its InactiveExitTimestamp (noticed by a new
    ExecMainStartTimestamp) to the first answer the poller
    had from the new process (a time check and a dict per tick; one row when a start ends). A start
    that began before the tracker did is recorded too, timed by systemd's ActiveEnterTimestamp where
    its gate said ready, else marked not measured (`_time_unseen`)."""

    def __init__(self) -> None:
        self.stamps: dict[int, str] = {}
        self.last_ok: dict[int, datetime | None] = {}
        self.pending: dict[int, dict[str, Any]] = {}  # engine pk -> the start being timed
        self.since = time.time()  # a start that began before this was not seen from its beginning

    def track(
        self, engines: Sequence[Engine], units: Mapping[str, Mapping[str, Any]], processes: Mapping[str, Any]
    ) -> None:
        for e in engines:
            props = units.get(e.unit) or {}
            stamp = props.get("ExecMainStartTimestamp")
            first = e.pk not in self.stamps
            if first and not stamp and props.get("ActiveState") in ("inactive", "failed"):
                # seen never started (or collected): its next start is one seen from its beginning,
                # even when the engine answers by the next tick
                self.stamps[e.pk] = ""
                first = False
            if stamp and stamp != self.stamps.get(e.pk):
                self.stamps[e.pk] = stamp
                self._failed(e, self.pending.pop(e.pk, None))  # started again before it served
                # A start the worker did not see begin (it ran while the worker was down) is recorded too,
                # but timed by systemd's clock where a gate held it (issue 47), never by the first answer.
                before = first and _began_before(props, self.since)
                if not first or before or (e.status != "up" and props.get("ActiveState") in ("active", "activating")):
                    self.pending[e.pk] = {
                        "stamp": stamp,
                        "inactive_exit": props.get("InactiveExitTimestamp"),
                        "active": props.get("ActiveEnterTimestamp"),
                        "compilers": 0,
                        "ok_before": None if before else self.last_ok.get(e.pk) if not first else e.last_ok_at,
                        "pid": int(props.get("MainPID") or 0) or None,  # names its gate's journal lines
                        "unseen_start": before,
                    }
            p = self.pending.get(e.pk)
            if p is not None and "healthy" not in p and props.get("ActiveState") in ("failed", "inactive"):
                self._failed(e, self.pending.pop(e.pk))  # its gate gave up, or the process died
                p = None
            if p is not None:
                mine = [c for c in processes.get("compiler_procs") or [] if c.get("unit") == e.unit]
                p["compilers"] = max(p["compilers"], len(mine))
                p["active"] = props.get("ActiveEnterTimestamp") or p["active"]
                if e.status == "up" and e.last_ok_at and (p["ok_before"] is None or e.last_ok_at > p["ok_before"]):
                    p.setdefault("healthy", e.last_ok_at)
                # A readiness helper in ExecStartPost= sees the engine answer before systemd calls the
                # unit active: the start is stored once the unit is no longer activating (with its
                # ActiveEnterTimestamp), timed to the first answer.
                if "healthy" in p and props.get("ActiveState") != "activating":
                    del self.pending[e.pk]
                    record_start(e, p)
            self.last_ok[e.pk] = e.last_ok_at

    @staticmethod
    def _failed(engine: Engine, pending: dict[str, Any] | None) -> None:
        """A start that ended without serving: its row, with what its readiness gate said."""
        if pending is None or "healthy" in pending:
            return

        record_failed_start(engine, pending, kind=start_kind(pending))


def start_kind(pending: Mapping[str, Any]) -> str:
    """cold when compilers were seen in the unit during the start; warm when none were and the worker
    watched it from its beginning; else unknown: a start made while the worker was down may have
    compiled before it looked (issue 47: a gated cold start stored as warm, and the warm class a
    budget is learned from skewed by it)."""
    if pending["compilers"]:
        return EngineStart.Kind.COLD
    return EngineStart.Kind.UNKNOWN if pending.get("unseen_start") else EngineStart.Kind.WARM


def _began_before(props: Mapping[str, Any], since: float) -> bool:
    """Whether the unit's current start (InactiveExit, else ExecMainStart) began before SINCE (epoch s)."""
    began = parse_timestamp(props.get("InactiveExitTimestamp")) or parse_timestamp(props.get("ExecMainStartTimestamp"))
    return began is not None and began.timestamp() < since and props.get("ActiveState") in ("active", "activating")


def record_start(engine: Engine, pending: dict[str, Any]) -> EngineStart | None:
    """Store one measured start and raise what it broke: over its budget, or a cold start
    overlapping another engine's on the same box."""
    from sparkops.alerts.services import external_alert_fire, external_alert_resolve

    started = parse_timestamp(pending["stamp"])
    if started is None:
        return None
    # The start began when the unit left inactive (InactiveExitTimestamp), before its ExecStartPre=
    # ran: systemd 252 updates it on every start, automatic restarts included. Without an
    # ExecStartPre= it is a few hundred microseconds after ExecMainStartTimestamp (the fork is
    # stamped first): the start is the earlier of the two, the same start when they are that close.
    began = parse_timestamp(pending.get("inactive_exit"))
    if began is not None and began <= started + timedelta(seconds=1):
        started = min(began, started)
    active = parse_timestamp(pending["active"])
    snap = latest_snapshot(engine)
    unit = ((snap.data if snap else {}) or {}).get("unit") or {}
    posts = unit.get("exec_start_post") or []
    budget = helper_budget_s(posts[-1].get("argv") or []) if posts else None
    timeout = unitconfig.timespan_s(unit.get("timeout_start_usec"))
    # "healthy" is set once the engine answered (track); a start with neither it nor a last answer
    # would have no end: it counts as served at its start rather than fail on max(None, …).
    healthy: datetime = pending.get("healthy") or engine.last_ok_at or started
    start = EngineStart.objects.create(
        engine=engine,
        started_at=started,
        active_at=active if active and active >= started else None,
        healthy_at=max(healthy, started),
        kind=start_kind(pending),
        compilers_max=pending["compilers"],
        budget_s=budget,
        timeout_s=timeout if timeout not in (None, float("inf")) else None,
    )

    attach(start, engine, since=started, mainpid=pending.get("pid"))  # its gate's verdict, from the journal
    if pending.get("unseen_start"):
        _time_unseen(start)
    limit = start.budget_s or start.timeout_s
    if limit and start.duration_s > limit:
        external_alert_fire(
            rule="start_over_budget",
            severity="warning",
            engine=engine,
            subject=engine.name,
            message=(
                f"{engine.name}'s {_kind_word(start)}start took {start.duration_s:.0f} s, past its "
                f"{'readiness budget' if start.budget_s else 'TimeoutStartSec'} of {limit:g} s"
            ),
        )
    else:
        external_alert_resolve(rule="start_over_budget", engine=engine, subject=engine.name)
    if start.kind == "cold":
        overlap = (
            EngineStart.objects.filter(
                engine__host_id=engine.host_id,
                kind="cold",
                started_at__lt=start.healthy_at,
                healthy_at__gt=start.started_at,
            )
            .exclude(engine=engine)
            .select_related("engine")
            .first()
        )
        if overlap is not None:
            external_alert_fire(
                rule="cold_starts_overlap",
                severity="warning",
                host=engine.host,
                subject=engine.host.name,
                message=(
                    f"{engine.name} and {overlap.engine.name} cold-started at once "
                    f"({start.started_at:%H:%M:%S} and {overlap.started_at:%H:%M:%S}): two compile "
                    "storms do not fit in one box; serialize the units"
                ),
            )
    return start


def _kind_word(start: EngineStart) -> str:
    return "" if start.kind == EngineStart.Kind.UNKNOWN else f"{start.kind} "


def _time_unseen(start: EngineStart) -> None:
    """A start that began before the worker saw it: served when its gate said ready, which is when
    systemd called it active (ActiveEnterTimestamp, systemd's own clock); without that verdict the
    worker's first answer is only an upper bound, kept as not measured (issue 47: a start of under a
    second read as 85 s, and a budget of 128 s learned from it)."""
    if start.gate == "ready" and start.active_at is not None:
        start.healthy_at = max(start.active_at, start.started_at)
    else:
        start.measured = False
    start.save(update_fields=["healthy_at", "measured"])


def restart_budget(engine: Engine) -> RestartBudget:
    """The engine's starts per class: {"cold"|"warm": {n, median, min, max, first, last}} (those that
    served), the latest that failed before serving, and the budgets of its latest start."""

    rows = list(EngineStart.objects.filter(engine=engine).order_by("started_at"))
    last = rows[-1] if rows else None
    out: RestartBudget = {
        "starts": rows[-20:][::-1],
        "classes": {},
        "failed": [r for r in rows if r.healthy_at is None][-5:][::-1],
        "budget_s": last.budget_s if last else None,
        "timeout_s": last.timeout_s if last else None,
    }
    for kind in ("cold", "warm"):
        # a failed start has no duration; one not measured (begun before the worker saw it) no true one;
        # one of unknown kind (begun before the worker saw it) is in neither class, measured or not
        mine = [r for r in rows if r.kind == kind and r.healthy_at is not None and r.measured]
        if mine:
            d = [r.duration_s for r in mine]
            out["classes"][kind] = {
                "n": len(mine),
                "median": median(d),
                "min": min(d),
                "max": max(d),
                "first": mine[0].started_at,
                "last": mine[-1].started_at,
            }
    return out


def box_cold_boot(host: Host) -> ColdBoot:
    """A full cold boot of HOST: the sum of its engines' median cold starts (they must be
    serialized), with each engine's figure; engines never seen cold count their slowest start."""

    parts: list[tuple[str, float, float | None, float | None]] = []
    for engine in Engine.objects.filter(host=host, retired_at__isnull=True).order_by("name"):
        b = restart_budget(engine)
        cold = b["classes"].get("cold")
        figure = (cold["median"] if cold else None) or max([c["max"] for c in b["classes"].values()] or [0])
        if figure:
            parts.append((engine.name, figure, b["budget_s"], b["timeout_s"]))
    return {"total_s": sum(p[1] for p in parts), "engines": parts}
