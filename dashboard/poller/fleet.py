"""Who polls what: the engines a box's poller owns, and which poller leads the fleet's upkeep.

A worker owns the engines of its own host. Engines of a host with no live worker (none
reported within `ORPHAN_AFTER_INTERVALS` poll intervals and a store interval: a remote
OpenAI-compatible endpoint, a box whose worker is down) are adopted by the live worker whose
host name sorts first, so in a steady fleet every engine is polled by exactly one worker;
during a hand-over an engine may be polled twice for a few seconds, which is harmless."""

from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from dashboard.clock import db_now
from dashboard.engine_lifecycle import report_lag_s
from dashboard.models import Engine, Host

ORPHAN_AFTER_INTERVALS = 5


def fleet_hosts():
    """Every host with its last report: (the rows, when they were read, by the database's clock:
    the reports are stamped with it)."""
    return list(Host.objects.only("pk", "name", "last_report_at")), db_now()


def fleet_roles(*, host, hosts=None):
    """(engines HOST's worker polls, whether it leads the fleet's upkeep).

    It polls its own host's engines, plus every orphan's when it is the leader: the live
    worker whose host name sorts first. The leader also runs the upkeep duties (alert
    outbox sweep, collector-stale check), so they run once per fleet, on a box other than
    the one they watch for every box but the leader's own."""
    hosts, read_at = hosts or fleet_hosts()
    cutoff = read_at - timedelta(seconds=settings.SPARKOPS_POLL_INTERVAL * ORPHAN_AFTER_INTERVALS + report_lag_s())
    live = [h for h in hosts if h.pk == host.pk or (h.last_report_at is not None and h.last_report_at >= cutoff)]
    leader = host.name == min(h.name for h in live)
    orphans = [h.pk for h in hosts if h not in live]
    query = Q(host=host) | Q(host__in=orphans) if leader and orphans else Q(host=host)
    # The JSON of the last readings stays in the database: parsing it for every engine (and
    # its host's, through the join) each tick was most of this query's cost. Every polled
    # engine gets a fresh `latest` anyway; the rare reader of a deferred one loads it.
    engines = (
        Engine.objects.select_related("host")
        .defer("latest", "host__latest")
        .filter(query, retired_at__isnull=True)
        .order_by("pk")
    )
    return list(engines), leader


def engines_due(engines, *, now=None):
    """Those of ENGINES whose own metrics interval has elapsed (half a tick of slack, so a
    2 s engine polled a few ms early never skips a tick)."""
    now = now or timezone.now()
    tick = settings.SPARKOPS_POLL_INTERVAL
    return [
        e
        for e in engines
        if e.last_poll_at is None or (now - e.last_poll_at).total_seconds() >= (e.poll_interval_s or tick) - tick / 2
    ]
