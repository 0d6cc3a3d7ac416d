"""The rows a poller holds between stores (`PendingWrites`), and the one transaction that
stores them."""

from collections.abc import Callable
from datetime import UTC, datetime

from django.db import transaction
from django.db.models.functions import Now

from dashboard import clock
from dashboard.models import Engine, Host, Series
from dashboard.samples import store
from sparkops.collectors.derive import EngineReading
from sparkops.poller.fetch import Fetched, HostCollected, StateKey, States
from sparkops.poller.reading import ENGINE_FIELDS, engine_apply, engine_reading


class PendingWrites:
    """The rows of one or several ticks (samples, collector states, engine and host rows, the
    rare KV-pool ledger rows), stored by `flush()` with one COPY, one upsert and two UPDATEs
    in one transaction. `urgent`: a status moved, an engine's or host's first reading, or a
    KV pool that changed: store it now."""

    def __init__(self, series: store.SeriesIds):
        self.batch = store.WriteBatch(series)
        self.engines: dict[int, Engine] = {}
        self.hosts: dict[int, Host] = {}
        self.kv_writes: list[Callable[[], None]] = []  # KV-pool ledger writes, in the order read
        self.urgent = False
        # {host pk: the fencing token of the lease its rows were read under}; a host not named
        # (no lease: `poll --once`, the tests, an engine of no box) is stored unfenced.
        self.fences: dict[int, int | None] = {}
        self.refused: set[int] = set()  # the hosts whose rows the last store refused (a stale fence)

    def __bool__(self):
        return bool(self.batch.samples or self.batch.states or self.engines or self.hosts or self.kv_writes)

    def add_host(self, host, collected: HostCollected):
        """Hold a host reading: its samples, its and its units' states, Host.latest."""
        self.batch.add_samples(ts=collected.at, host=host, values=collected.values)
        self.batch.put_states(
            {
                str(StateKey("host", host.pk)): collected.state,
                **{str(StateKey("unit", pk)): info for pk, info in collected.unit_infos.items()},
            }
        )
        if host.last_report_at is None:
            self.urgent = True  # its first report: the host is being watched, say so now
        # The clock offset measured at the last store stays in the reading until the next one.
        if isinstance(collected.reading, dict) and isinstance(host.latest, dict) and "clock_offset_s" in host.latest:
            collected.reading.setdefault("clock_offset_s", host.latest["clock_offset_s"])
        host.latest, host.last_report_at = collected.reading, collected.at
        self.hosts[host.pk] = host

    def add_engine(self, engine, fetched: Fetched, states: States) -> EngineReading:
        """Derive ENGINE's reading from what was fetched and hold its rows; STATES gets its new
        collector state. A KV-pool ledger row is held like the rest, and stored at once (the
        launch observation links its change-log entry to it)."""
        now = datetime.fromtimestamp(fetched.at, tz=UTC)
        held = len(self.kv_writes)
        reading, new_state, values = engine_reading(
            engine, fetched.snapshot, fetched.at, now, states, kv_writes=self.kv_writes
        )
        # Others compare the engine's stamps (a poll's age on /healthz, the fleet's adoption, the
        # status's age on the card): on the database's clock, not this worker's (a worker off by
        # an hour showed a poll in the future, which hid a stale worker for that hour).
        now = clock.to_shared(now)
        if len(self.kv_writes) > held:
            self.urgent = True
        key = StateKey("engine", engine.pk)
        states[key] = new_state
        self.batch.add_samples(ts=now, engine=engine, values=values)
        self.batch.put_states({str(key): new_state})
        first = engine.last_poll_at is None
        if engine_apply(engine, reading, now) or first:  # a moved status, or a new engine's first reading
            self.urgent = True
        self.engines[engine.pk] = engine
        return reading

    def flush(self):
        self.batch.resolve()  # series that could not be looked up when read (an outage)
        if self.batch.samples:  # an engine removed meanwhile took its series along: keep the others' samples
            alive = set(
                Series.objects.filter(pk__in={row[0] for row in self.batch.samples}).values_list("pk", flat=True)
            )
            self.batch.samples = [row for row in self.batch.samples if row[0] in alive]
        # What is held goes back when the store fails (the database refused, or is gone): the
        # next store writes it.
        samples, states = list(self.batch.samples), dict(self.batch.states)
        try:
            self._store()
        except BaseException:
            self.batch.samples, self.batch.states = samples, states
            raise
        self.engines, self.hosts, self.kv_writes, self.urgent = {}, {}, [], False

    def _fenced(self) -> set[int]:
        """The hosts whose fence this store passes, now the host's own (in the store's
        transaction: the row stays locked until it commits); the others are `refused`."""
        self.refused = set()
        for pk, fence in self.fences.items():
            if fence is not None and not Host.objects.filter(pk=pk, fence__lte=fence).update(fence=fence):
                self.refused.add(pk)
        return self.refused

    def _store(self):
        with transaction.atomic(savepoint=False):
            refused = self._fenced()
            self.batch.flush()
            for write in self.kv_writes:
                write()
            if refused:  # a poller that lost the box: its late status must not overwrite the new holder's
                self.engines = {pk: e for pk, e in self.engines.items() if e.host_id not in refused}
                self.hosts = {pk: h for pk, h in self.hosts.items() if pk not in refused}
            if self.engines:
                Engine.objects.bulk_update(list(self.engines.values()), ENGINE_FIELDS)
            if self.hosts:
                # The report's time is the database's (Now()), not this worker's clock: others
                # judge it by the database's (collector-stale, /healthz, adoption). How far this
                # worker's clock is off goes into the reading (the clock_skew rule, /healthz).
                offset = clock.offset_s()
            for host in self.hosts.values():
                if isinstance(host.latest, dict):
                    host.latest["clock_offset_s"] = offset
                Host.objects.filter(pk=host.pk).update(latest=host.latest, last_report_at=Now())

    def hold(self, newer: "PendingWrites", *, max_samples: int) -> int:
        """Take back what NEWER gathered after this one failed to store: the samples in the
        order they were read, the newest engine, host and collector state rows. At most
        MAX_SAMPLES samples are kept, the oldest dropped first; returns how many were dropped."""
        self.batch.samples.extend(newer.batch.samples)
        self.batch.states.update(newer.batch.states)
        self.engines.update(newer.engines)
        self.hosts.update(newer.hosts)
        self.fences.update(newer.fences)
        self.kv_writes.extend(newer.kv_writes)
        self.urgent = self.urgent or newer.urgent
        self.batch.series = newer.batch.series
        return self.batch.drop_oldest(max_samples)
