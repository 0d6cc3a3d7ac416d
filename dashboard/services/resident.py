"""The resident poller: the per-second work of a box's worker, without a Celery task per poll.

Liveness probes every second and metrics every 2 s are nearly all SparkOps does. Sent by beat
as Celery tasks, each poll paid a beat tick, a broker round trip, a task trace and a database
reconnect: 4.5 % of a core for three engines, five times the budget of
bench/poll_overhead.py. Here one thread in each `sparkops worker` keeps one event loop, one
HTTP pool per engine and one database connection, and runs on the clock:

- every poll interval: read this host's sources (PSI, GPU, systemd, journal, processes)
  and the metrics of the owned engines that are due (each at its own interval), then store
  them all in one transaction;
- every liveness interval: probe the owned engines (one cheap request each).

Ownership: a worker owns the engines of its own host. Engines of a host with no live worker
(none reported within `ORPHAN_AFTER_INTERVALS` poll intervals: a remote OpenAI-compatible
endpoint, a box whose worker is down) are adopted by the live worker whose host name sorts
first, so in a steady fleet every engine is polled by exactly one worker; during a hand-over
an engine may be polled twice for a few seconds, which is harmless.

One poller per box: a second worker started for the same host (a scaled compose service,
`sparkops up` beside a hand-started worker) finds the box's lease taken in Redis and polls
nothing until the holder is gone (`PollerLease`), so no engine is sampled twice. Extra
task-only workers: `sparkops worker --no-poller`.

A tick that comes due while the previous one still runs is skipped, never queued: a stale
poll is worth less than none. No exception ends the thread; the next tick proceeds."""
import logging
import os
import socket
import threading
import time
import uuid
from datetime import timedelta

from celery import bootsteps
from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import Q
from django.utils import timezone

from dashboard.collectors import runner
from dashboard.models import Engine, Host
from dashboard.services import polling

log = logging.getLogger(__name__)
ORPHAN_AFTER_INTERVALS = 5
HOSTS_REFRESH_S = 10.0  # who leads and who is orphaned may be this stale; the engine list is read every tick


def fleet_hosts():
    """Every host with its last report: (the rows, when they were read)."""
    return list(Host.objects.only("pk", "name", "last_report_at")), timezone.now()


def fleet_roles(*, host, hosts=None):
    """(engines HOST's worker polls, whether it leads the fleet's upkeep).

    It polls its own host's engines, plus every orphan's when it is the leader: the live
    worker whose host name sorts first. The leader also runs the upkeep duties (alert
    outbox sweep, collector-stale check), so they run once per fleet, on a box other than
    the one they watch for every box but the leader's own."""
    hosts, read_at = hosts or fleet_hosts()
    cutoff = read_at - timedelta(seconds=settings.SPARKOPS_POLL_INTERVAL * ORPHAN_AFTER_INTERVALS)
    live = [h for h in hosts if h.pk == host.pk or (h.last_report_at is not None and h.last_report_at >= cutoff)]
    leader = host.name == min(h.name for h in live)
    orphans = [h.pk for h in hosts if h not in live]
    query = Q(host=host) | Q(host__in=orphans) if leader and orphans else Q(host=host)
    # The JSON of the last readings stays in the database: parsing it for every engine (and
    # its host's, through the join) each tick was most of this query's cost. Every polled
    # engine gets a fresh `latest` anyway; the rare reader of a deferred one loads it.
    engines = Engine.objects.select_related("host").defer("latest", "host__latest").filter(query).order_by("pk")
    return list(engines), leader


def engines_due(engines, *, now=None):
    """Those of ENGINES whose own metrics interval has elapsed (half a tick of slack, so a
    2 s engine polled a few ms early never skips a tick)."""
    now = now or timezone.now()
    tick = settings.SPARKOPS_POLL_INTERVAL
    return [e for e in engines if e.last_poll_at is None
            or (now - e.last_poll_at).total_seconds() >= (e.poll_interval_s or tick) - tick / 2]


class Clock:
    """Next due time of one periodic duty; a missed tick is skipped, not made up."""

    def __init__(self, interval, start):
        self.interval, self.next = interval, start

    def due(self, now):
        return now >= self.next

    def advance(self, now):
        self.next += self.interval
        if self.next <= now:  # the duty overran one or more ticks: skip them
            self.next = now + self.interval


class PollerLease:
    """The right to poll one host, held in Redis by one poller at a time.

    Taken with SET NX and renewed (only by its holder) every `RENEW_S` for `TTL_S`, so a
    poller that dies frees the box within TTL_S. Redis unreachable: poll anyway (a box
    polled twice for a while is better than a box not watched)."""

    TTL_S, RENEW_S = 15.0, 5.0
    _RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
    _RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"

    def __init__(self, host_name, url=None):
        import redis

        self.key = f"{settings.SPARKOPS_CHANNEL_PREFIX}:poller:{host_name}"
        self.token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.client = redis.Redis.from_url(url or settings.CELERY_BROKER_URL, socket_timeout=1.0, socket_connect_timeout=1.0)
        self.held, self.checked_at, self.warned = False, float("-inf"), False

    def holds(self):
        """Whether this poller may poll now (asks Redis at most every RENEW_S)."""
        now = time.monotonic()
        if now - self.checked_at < self.RENEW_S:
            return self.held
        self.checked_at = now
        ttl_ms = int(self.TTL_S * 1000)
        try:
            if self.held:
                self.held = bool(self.client.eval(self._RENEW, 1, self.key, self.token, ttl_ms))
            if not self.held:
                self.held = bool(self.client.set(self.key, self.token, nx=True, px=ttl_ms))
                if not self.held and not self.warned:
                    log.warning("another poller holds %s (%s): this worker polls nothing until it is gone; "
                                "run extra workers with --no-poller", self.key, self.client.get(self.key))
                    self.warned = True
        except Exception as exc:  # Redis down: fail open
            log.warning("poller lease %s unknown (%s): polling anyway", self.key, exc)
            self.held = True
        return self.held

    def release(self):
        try:
            self.client.eval(self._RELEASE, 1, self.key, self.token)
        except Exception:
            pass  # it expires on its own


class ResidentPoller:
    """One daemon thread polling HOST's sources and owned engines until `stop()`.

    The engine list and the fleet roles are read once per metrics cycle and reused by the
    probes in between, so a steady probe costs its HTTP requests and no query; an engine
    added or removed is picked up within one poll interval."""

    def __init__(self, host_name, *, poll_interval=None, liveness_interval=None, duties=None, lease=None):
        from dashboard.schedule import resident_duties

        self.host_name = host_name
        self.poll_interval = poll_interval or settings.SPARKOPS_POLL_INTERVAL
        self.liveness_interval = liveness_interval or settings.SPARKOPS_LIVENESS_INTERVAL
        self.duties = resident_duties() if duties is None else duties  # name -> (interval, fn): leader only
        self.host, self.engines, self.leader = None, [], False
        self.host_state = None  # this host's collector state, kept here between polls (one query fewer)
        self.hosts, self.hosts_at = None, 0.0  # fleet_hosts(), re-read every HOSTS_REFRESH_S
        self.answered = {}  # engine pk -> (monotonic, poll time) of its last metrics poll that answered
        self.lease = lease  # a PollerLease, or None: poll unconditionally (tests, `poll --once`)
        self.cycles = {"metrics": 0, "probe": 0, "failed": 0, **{name: 0 for name in self.duties}}
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        self._thread = threading.Thread(target=self.run, name=f"sparkops-poller-{self.host_name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout=10.0):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self):
        start = time.monotonic()
        clocks = {"metrics": Clock(self.poll_interval, start), "probe": Clock(self.liveness_interval, start),
                  **{name: Clock(interval, start + interval) for name, (interval, _) in self.duties.items()}}
        try:
            while not self._stop.is_set():
                for duty, clock in clocks.items():
                    if clock.due(time.monotonic()) and not self._stop.is_set():
                        self.run_duty(duty)
                        clock.advance(time.monotonic())
                self._stop.wait(max(0.0, min(c.next for c in clocks.values()) - time.monotonic()))
        finally:
            if self.lease is not None:
                self.lease.release()
            runner.close()
            connection.close()

    def run_duty(self, duty):
        """Run one duty now; an exception is logged and counted, never raised."""
        try:
            if self.lease is not None and not self.lease.holds():
                return
            if duty == "metrics":
                self.metrics_cycle()
            elif duty == "probe":
                self.probe_cycle()
            elif self.leader:
                self.duties[duty][1]()
            else:
                return
            self.cycles[duty] += 1
        except Exception:
            self.cycles["failed"] += 1
            self.host = self.host_state = self.hosts = None  # re-read: the host may have been deleted and recreated
            log.exception("resident poller (%s): %s failed; the next tick proceeds", self.host_name, duty)
            connection.close()  # a broken connection must not fail every later cycle
        finally:
            close_old_connections()  # honours CONN_MAX_AGE and drops connections left unusable

    def metrics_cycle(self):
        if self.host is None:
            self.host, _ = Host.objects.get_or_create(name=self.host_name)
        if self.hosts is None or time.monotonic() - self.hosts_at >= HOSTS_REFRESH_S:
            self.hosts, self.hosts_at = fleet_hosts(), time.monotonic()
        self.engines, self.leader = fleet_roles(host=self.host, hosts=self.hosts)
        due = engines_due(self.engines)
        own = [e for e in self.engines if e.host_id == self.host.pk]
        self.host_state, readings = polling.metrics_tick(host=self.host, host_engines=own, host_state=self.host_state,
                                                         engines=due)
        for engine, reading in zip(due, readings):
            if reading.get("up"):
                self.answered[engine.pk] = (time.monotonic(), engine.last_poll_at)

    def probe_cycle(self):
        """Probe every owned engine, except those whose metrics poll answered within the last
        half liveness interval: a full /metrics answer is proof of life, so that probe would
        only repeat it (the metrics tick and every other probe tick coincide). Their liveness
        is recorded from the poll, so the liveness signal still goes out every tick."""
        now = time.monotonic()
        answered = {pk: at for pk, (t, at) in self.answered.items() if now - t < self.liveness_interval / 2}
        probe = [e for e in self.engines if e.pk not in answered]
        if probe:
            polling.engines_probe(engines=probe)
        for engine in self.engines:
            if engine.pk in answered:
                polling.engine_record_liveness(engine=engine, status="up", reason="", rechecked=False,
                                               checked_at=answered[engine.pk])


class PollerStep(bootsteps.StartStopStep):
    """Runs a ResidentPoller for `app.conf.sparkops_poller_host` alongside the worker: it
    starts when the worker starts and stops on the worker's warm shutdown."""

    label = "SparkOps resident poller"

    def __init__(self, worker, **kwargs):
        super().__init__(worker, **kwargs)
        self.poller = None

    def start(self, worker):
        host_name = worker.app.conf.sparkops_poller_host
        self.poller = ResidentPoller(host_name, lease=PollerLease(host_name)).start()

    def stop(self, worker):
        if self.poller is not None:
            self.poller.stop()
            self.poller = None

    shutdown = stop
