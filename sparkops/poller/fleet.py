"""Who polls what: the engines a box's poller owns, and which poller leads the fleet's upkeep.

A worker owns the engines of its own host. Engines of a host with no live worker (none
reported within `ORPHAN_AFTER_INTERVALS` poll intervals and a store interval: a remote
OpenAI-compatible endpoint, a box whose worker is down) are adopted by the live worker whose
host name sorts first, the leader. It polls an orphan only while it holds the orphan's lease in
Redis (`lease.Adoptions`: the key the box's own worker holds while it runs), so every engine is
polled by exactly one worker, through adoption and hand-back alike: two pollers disagreeing
made an engine's status flap and its alerts fire twice (issue 48).

An orphan whose worker reported before is a lost box: the leader cannot tell a cut link from
a dead engine, so its engines that do not answer are unknown, never down, and page nothing of
their own; the box's collector_stale page stands for them.

The same judgement refuses controls (`box_reachable`): a restart, a unit fix or a benchmark run
for a box whose worker stopped reporting is refused at once with the reason, not queued on its
`host.<name>` queue to run whenever (if ever) that worker comes back."""

from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Q

from dashboard.clock import db_now, report_lag_s, report_overdue, shared_now
from dashboard.dbgate import database_back_at
from dashboard.models import Engine, Host
from sparkops.alerts.rules.host import stale_limit

ORPHAN_AFTER_INTERVALS = 5


def fleet_hosts():
    """Every host with its last report: (the rows, when they were read, by the database's clock:
    the reports are stamped with it)."""
    return list(Host.objects.only("pk", "name", "last_report_at")), db_now()


class Roles(NamedTuple):
    """What one worker's poller does: ENGINES it polls, whether it is the LEADER (upkeep, adoption),
    the ORPHANS it may adopt ({host name: pk}: hosts with no live worker, when it leads), and
    among them the UNREACHABLE boxes ({pk: last report}: a worker reported there and stopped)."""

    engines: list[Engine]
    leader: bool
    orphans: dict[str, int]
    unreachable: dict[int, datetime]


def fleet_roles(*, host, hosts=None):
    """(engines HOST's worker polls, whether it leads the fleet's upkeep): `fleet_view`'s first two."""
    view = fleet_view(host=host, hosts=hosts)
    return view.engines, view.leader


def fleet_view(*, host, hosts=None) -> Roles:
    """HOST's worker's `Roles`.

    It polls its own host's engines, plus every orphan's when it is the leader: the live
    worker whose host name sorts first. The leader also runs the upkeep duties (alert
    outbox sweep, collector-stale check), so they run once per fleet, on a box other than
    the one they watch for every box but the leader's own. An orphan that had a worker of its
    own is an unreachable box: its engines are unknown when they do not answer the leader
    (a partition and a dead engine look the same from there), and its one page is the box's."""
    hosts, read_at = hosts or fleet_hosts()
    cutoff = read_at - timedelta(seconds=settings.SPARKOPS_POLL_INTERVAL * ORPHAN_AFTER_INTERVALS + report_lag_s())
    live = [h for h in hosts if h.pk == host.pk or (h.last_report_at is not None and h.last_report_at >= cutoff)]
    leader = host.name == min(h.name for h in live)
    orphaned = [h for h in hosts if h not in live] if leader else []
    orphans = [h.pk for h in orphaned]
    query = Q(host=host) | Q(host__in=orphans) if orphans else Q(host=host)
    # The JSON of the last readings stays in the database: parsing it for every engine (and
    # its host's, through the join) each tick was most of this query's cost. Every polled
    # engine gets a fresh `latest` anyway; the rare reader of a deferred one loads it.
    engines = (
        Engine.objects.select_related("host")
        .defer("latest", "host__latest")
        .filter(query, retired_at__isnull=True)
        .order_by("pk")
    )
    unreachable = {h.pk: h.last_report_at for h in orphaned if h.last_report_at is not None}
    return Roles(list(engines), leader, {h.name: h.pk for h in orphaned}, unreachable)


def engines_due(engines, *, now=None):
    """Those of ENGINES whose own metrics interval has elapsed (half a tick of slack, so a
    2 s engine polled a few ms early never skips a tick)."""
    now = now or shared_now()  # last_poll_at is on the database's clock
    tick = settings.SPARKOPS_POLL_INTERVAL
    return [
        e
        for e in engines
        if e.last_poll_at is None or (now - e.last_poll_at).total_seconds() >= (e.poll_interval_s or tick) - tick / 2
    ]


class BoxUnreachable(ValidationError):
    """A control refused because its box's worker is not there to take it: nothing was queued."""

    def __str__(self) -> str:  # the sentence itself, where a ValidationError prints a list
        return "; ".join(self.messages)


def box_reachable(host: Host, *, now: datetime | None = None) -> tuple[bool, str]:
    """(whether HOST's worker is there to take work now, and if not why, in words). The box is
    reachable while collector_stale would not page it: its worker stored a report within
    `stale_limit()`, by the database's clock. The report is read again here: a row loaded
    before the worker's last store says nothing about now."""
    reported = Host.objects.filter(pk=host.pk).values_list("last_report_at", flat=True).first()
    if reported is None:
        return False, (
            f"box {host.name} has no worker yet: none has reported since the box was added (a worker "
            f"reports within seconds of its start; start `sparkops worker --host {host.name}` on that box)"
        )
    now = now or db_now()
    limit = stale_limit()
    if not report_overdue(reported, now=now, limit=limit, back=database_back_at()):
        return True, ""
    when = reported.astimezone(UTC)
    at = f"{when:%H:%M:%S}" if now - reported < timedelta(hours=20) else f"{when:%Y-%m-%d %H:%M:%S}"
    return False, (
        f"box {host.name} unreachable: its worker (queue {host.queue}) last reported {at} UTC, "
        f"{int((now - reported).total_seconds())} s ago (collector_stale's limit: {limit.total_seconds():g} s)"
    )


def require_reachable(host: Host) -> None:
    """Raise `BoxUnreachable` with the reason unless HOST's worker is there to take work now."""
    ok, why = box_reachable(host)
    if not ok:
        raise BoxUnreachable(f"{why}; nothing was queued.")
