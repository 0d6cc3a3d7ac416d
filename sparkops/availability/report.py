"""The availability report (selectors): per engine and per box, the share of a period it was up,
its incidents with time to detect and time to recover, and the planned work beside them.

Where the numbers come from (all records SparkOps already keeps, nothing new is written):
- Downtime is the alert record: an engine's `engine_down` events, a box's `collector_stale`
  events, from `started_at` (when the death was first seen) to `resolved_at` (open: until now).
  Pending events that never fired are deleted by the lifecycle, so a blip under the rule's
  threshold and a planned restart that came back within its budget leave no downtime.
- Planned work is shown apart and never counted as downtime:
  * maintenance windows (alerts app) that cover the engine or box: any downtime inside one;
  * restarts SparkOps ran (the Restart button: its "Restart of … requested by …" change-log
    note, then the worker's "systemctl restart … : done" note): an `engine_down` event that began
    between the request and PROBE_SLACK after the outcome is the restart itself, in full, unless
    it ended as "did not come back" (cause `no_return_after_restart`: a failed restart is an
    outage).
- Time to detect: `fired_at − started_at` (death seen → alert fired). Time to recover:
  `resolved_at − started_at`. Both over the period's unplanned incidents."""

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from dashboard.models import Engine, Host
from sparkops.alerts.models import AlertEvent, MaintenanceWindow
from sparkops.changelog.models import SPARKOPS_AUTHOR, Entry

from .periods import Period
from .spans import Span, spans_clip, spans_seconds, spans_subtract

DOWN_RULE = {"engine": "engine_down", "box": "collector_stale"}
NO_RETURN = "no_return_after_restart"
# How long after a restart's outcome the probe may take to see the engine gone (two failed probes).
PROBE_SLACK = timedelta(seconds=60)
# A restart's request and its outcome are paired if no further apart than this (unit_actions' own
# timeout is 120 s; the queue may wait).
RESTART_PAIRING = timedelta(minutes=30)
RESTART_REQUESTED = re.compile(r"^Restart of (?P<unit>\S+) requested by (?P<who>\S+)")
RESTART_OUTCOME = re.compile(
    r"^(systemctl restart (?P<unit>\S+) on \S+(: done| failed)|Restart of (?P<unit2>\S+) refused)"
)


@dataclass
class Outage:
    """One incident (a fired down event) as the report counts it."""

    event_id: int
    cause: str
    message: str
    started_at: datetime
    fired_at: datetime | None
    resolved_at: datetime | None
    planned_by: str = ""  # the planned work it was part of; "" for an outage
    counted_s: float = 0.0  # its downtime inside the period, planned work cut out

    @property
    def detect_s(self) -> float | None:
        return (self.fired_at - self.started_at).total_seconds() if self.fired_at else None

    @property
    def recover_s(self) -> float | None:
        return (self.resolved_at - self.started_at).total_seconds() if self.resolved_at else None

    @property
    def url(self) -> str:
        return reverse("alerts:detail", args=[self.event_id])

    @property
    def texts(self) -> dict[str, str]:
        """Its durations as the page prints them."""
        return {
            k: duration_text(v)
            for k, v in (("detect", self.detect_s), ("recover", self.recover_s), ("counted", self.counted_s))
        }


@dataclass
class Planned:
    """Planned work: a maintenance window or a restart SparkOps ran."""

    kind: str  # "maintenance" | "restart"
    title: str
    start: datetime
    end: datetime
    url: str = ""
    outcome: str = ""  # a restart's: "done", or the worker's note when it failed

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    @property
    def text(self) -> str:
        return duration_text(self.seconds)


def uptime_pct(*, down_s: float, measured_s: float) -> float | None:
    """Rounded down to 0.01 %, so any downtime at all reads below 100.00."""
    if measured_s <= 0:
        return None
    return math.floor(10000 * (1 - down_s / measured_s)) / 100


@dataclass
class Day:
    """One day of a week's or month's row."""

    day: date
    measured_s: float
    down_s: float

    @property
    def uptime_pct(self) -> float | None:
        return uptime_pct(down_s=self.down_s, measured_s=self.measured_s)


@dataclass
class Row:
    kind: str  # "engine" | "box"
    name: str
    url: str
    measured_s: float
    down_s: float = 0.0
    planned_down_s: float = 0.0
    unknown_s: float = 0.0  # its box was not reporting: left out of measured_s
    outages: list[Outage] = field(default_factory=list)
    planned: list[Planned] = field(default_factory=list)
    days: list[Day] = field(default_factory=list)  # a week's or a month's, day by day

    @property
    def incidents(self) -> list[Outage]:
        return [o for o in self.outages if not o.planned_by]

    @property
    def uptime_pct(self) -> float | None:
        return uptime_pct(down_s=self.down_s, measured_s=self.measured_s)

    @property
    def mttd_s(self) -> float | None:
        return _mean(o.detect_s for o in self.incidents)

    @property
    def mttr_s(self) -> float | None:
        return _mean(o.recover_s for o in self.incidents)

    @property
    def texts(self) -> dict[str, str]:
        """Its durations as the page prints them."""
        pairs = (
            ("down", self.down_s),
            ("planned", self.planned_down_s),
            ("unknown", self.unknown_s),
            ("mttd", self.mttd_s),
            ("mttr", self.mttr_s),
        )
        return {k: duration_text(v) for k, v in pairs}


@dataclass
class Report:
    period: Period
    start: datetime
    end: datetime  # the period's end, or now while it runs
    rows: list[Row]


def _mean(values) -> float | None:
    seen = [v for v in values if v is not None]
    return sum(seen) / len(seen) if seen else None


def availability_report(*, period: Period, now: datetime) -> Report:
    """Every engine (retired ones while they were watched) and every box over PERIOD, up to NOW."""
    start, end = period.start, min(period.end, now)
    events = _events(start, end)
    windows = list(MaintenanceWindow.objects.filter(starts_at__lt=end, ends_at__gt=start))
    restarts = _restarts(start, end)
    days = [(d, lo, hi) for d, lo, hi in period.days() if lo < end] if period.kind != "day" else []
    rows = []
    # A box that stops reporting is one incident: its engines' state is unknown meanwhile (nothing
    # pages for them), so that time is left out of their measure rather than counted up or down.
    box_down = {
        host_id: [(o.started_at, o.resolved_at or now) for o in outages]
        for (kind, host_id), outages in events.items()
        if kind == "box"
    }
    engines = Engine.objects.filter(Q(retired_at__isnull=True) | Q(retired_at__gt=start), created_at__lt=end)
    for engine in engines.order_by("name"):
        mine = [
            w
            for w in windows
            if w.engine_id == engine.pk or (w.engine_id is None and w.host_id in (None, engine.host_id))
        ]
        span = (max(start, engine.created_at), min(end, engine.retired_at or end))
        row = Row("engine", engine.name, reverse("engine-detail", args=[engine.name]), 0.0)
        rows.append(
            _fill(
                row,
                span,
                outages=events["engine", engine.pk],
                windows=mine,
                restarts=restarts.get(engine.pk, []),
                unknown=box_down.get(engine.host_id, []),
                now=now,
                days=days,
            )
        )
    for host in Host.objects.filter(created_at__lt=end).order_by("name"):
        mine = [w for w in windows if w.engine_id is None and w.host_id in (None, host.pk)]
        row = Row("box", host.name, reverse("host-detail", args=[host.name]), 0.0)
        span = (max(start, host.created_at), end)
        rows.append(
            _fill(row, span, outages=events["box", host.pk], windows=mine, restarts=[], unknown=[], now=now, days=days)
        )
    return Report(period=period, start=start, end=end, rows=rows)


def _events(start: datetime, end: datetime) -> dict[tuple[str, int | None], list[Outage]]:
    """The fired down events overlapping [start, end), by ("engine", id) or ("box", id); one query."""
    qs = AlertEvent.objects.filter(
        Q(rule=DOWN_RULE["engine"], engine__isnull=False) | Q(rule=DOWN_RULE["box"], host__isnull=False),
        state__in=[AlertEvent.State.FIRING, AlertEvent.State.RESOLVED],
        started_at__lt=end,
    ).filter(Q(resolved_at__isnull=True) | Q(resolved_at__gt=start))
    out: dict[tuple[str, int | None], list[Outage]] = defaultdict(list)
    for ev in qs.order_by("started_at"):
        key = ("engine", ev.engine_id) if ev.rule == DOWN_RULE["engine"] else ("box", ev.host_id)
        out[key].append(Outage(ev.pk, ev.cause, ev.message, ev.started_at, ev.fired_at, ev.resolved_at))
    return out


def _restarts(start: datetime, end: datetime) -> dict[int, list[Planned]]:
    """Restarts SparkOps ran, by engine id: each request note paired with the next outcome note of
    the same unit (no outcome yet: the restart spans just its request)."""
    notes = (
        Entry.objects.filter(
            kind=Entry.Kind.INCIDENT_NOTE,
            author__isnull=True,
            author_name__iexact=SPARKOPS_AUTHOR,
            effective_at__gte=start - RESTART_PAIRING,
            effective_at__lt=end + RESTART_PAIRING,
        )
        .prefetch_related("engines")
        .order_by("effective_at", "id")
    )
    out: dict[int, list[Planned]] = defaultdict(list)
    open_: dict[tuple[int, str], Planned] = {}
    for note in notes:
        for engine in note.engines.all():
            if asked := RESTART_REQUESTED.match(note.title):
                planned = Planned("restart", note.title, note.effective_at, note.effective_at, note.get_absolute_url())
                open_[engine.pk, asked["unit"]] = planned
                out[engine.pk].append(planned)
            elif done := RESTART_OUTCOME.match(note.title):
                paired = open_.pop((engine.pk, done["unit"] or done["unit2"]), None)
                if paired is not None and note.effective_at - paired.start <= RESTART_PAIRING:
                    paired.end = note.effective_at
                    paired.outcome = "done" if note.title.endswith(": done") else note.title
    return {pk: [p for p in ps if p.end > start - PROBE_SLACK and p.start < end] for pk, ps in out.items()}


def _planned_outages(outages: list[Outage], restarts: list[Planned], now: datetime) -> list[Span]:
    """Mark the outages that were a restart SparkOps ran (see the module's docstring); their spans."""
    spans = []
    for outage in outages:
        restart = next(
            (r for r in restarts if r.start <= outage.started_at <= r.end + PROBE_SLACK and outage.cause != NO_RETURN),
            None,
        )
        if restart is not None:
            outage.planned_by = f"restart requested at {timezone.localtime(restart.start):%H:%M:%S}"
            spans.append((outage.started_at, outage.resolved_at or now))
    return spans


def _fill(row: Row, span: Span, *, outages, windows, restarts, unknown: list[Span], now, days) -> Row:
    """ROW over SPAN (the period, from the subject's creation, until now or its retirement): its
    outages (planned ones marked), planned work, downtime, the UNKNOWN time left out of its measure
    (its box's incidents), and DAYS ((day, start, end) of a week or a month) each on its own."""
    start, end = span
    row.planned = [Planned("maintenance", w.reason or "maintenance window", w.starts_at, w.ends_at) for w in windows]
    row.planned += restarts
    cut = [(w.starts_at, w.ends_at) for w in windows] + _planned_outages(outages, restarts, now)
    for outage in outages:
        lasted = (outage.started_at, outage.resolved_at or now)
        outage.counted_s = spans_seconds(spans_subtract(spans_clip([lasted], start=start, end=end), cut))
    row.outages = outages
    down = spans_clip(((o.started_at, o.resolved_at or now) for o in outages), start=start, end=end)
    dark = spans_subtract(spans_clip(unknown, start=start, end=end), down)
    row.measured_s = max(0.0, (end - start).total_seconds()) - spans_seconds(dark)
    row.unknown_s = spans_seconds(dark)
    row.down_s = spans_seconds(spans_subtract(down, cut))
    row.planned_down_s = spans_seconds(down) - row.down_s
    row.planned.sort(key=lambda p: p.start)
    for day, day_start, day_end in days:
        lo, hi = max(day_start, start), min(day_end, end)
        if hi > lo:
            measured = (hi - lo).total_seconds() - spans_seconds(spans_clip(dark, start=lo, end=hi))
            down_s = spans_seconds(spans_subtract(spans_clip(down, start=lo, end=hi), cut))
            row.days.append(Day(day, measured, down_s))
    return row


def duration_text(seconds: float | None) -> str:
    """ "—", "0.8 s", "57 s", "5 min", "1 min 25 s", "2 h 5 min", "3 d 4 h"."""
    if seconds is None:
        return "—"
    if seconds < 10:
        return f"{seconds:.1f} s".replace(".0 s", " s")
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min" + (f" {whole % 60} s" if whole % 60 else "")
    if whole < 86400:
        return f"{whole // 3600} h" + (f" {whole % 3600 // 60} min" if whole % 3600 // 60 else "")
    return f"{whole // 86400} d" + (f" {whole % 86400 // 3600} h" if whole % 86400 // 3600 else "")
