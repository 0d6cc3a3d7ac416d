"""The write side of the sample store: samples in, rollups (min/mean/max) and retention.

Raw samples are kept 48 hours, 1-minute rollups 90 days, 1-hour rollups for ever.
Rollups are upserts over a trailing window, so running them twice, late, or from two
workers gives the same rows."""

import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import Avg, Count, Field, Max, Min, Model, QuerySet
from django.db.models.functions import TruncMinute
from django.utils import timezone

from dashboard.dbgate import GATE
from dashboard.models import CollectorState, Engine, Host, Rollup, Sample, Series
from dashboard.models.samples import MINUTE_RETENTION, RAW_RETENTION

MINUTE, HOUR = Rollup.Resolution.MINUTE, Rollup.Resolution.HOUR


class SeriesIds:
    """(engine id, host id, metric) -> series id, read or created on first use. A series is
    never renamed, so a poller keeps one for its life; it drops it after a failed store, whose
    rolled-back transaction may have taken new series with it."""

    def __init__(self) -> None:
        self.ids: dict[tuple, int] = {}

    def get(self, *, metric: str, engine_id: int | None = None, host_id: int | None = None) -> int:
        key = (engine_id, host_id, metric)
        sid = self.ids.get(key)
        if sid is None:
            lookup = (
                {"engine_id": engine_id, "host__isnull": True}
                if engine_id
                else {"host_id": host_id, "engine__isnull": True}
            )
            sid = Series.objects.filter(metric=metric, **lookup).values_list("pk", flat=True).first()
            if sid is None:
                sid = _create_series(metric=metric, engine_id=engine_id, host_id=host_id)
            self.ids[key] = sid
        return sid


def _create_series(*, metric: str, engine_id: int | None, host_id: int | None) -> int:
    # Two workers may race on the first sample; the unique constraint settles it.
    with transaction.atomic():
        Series.objects.bulk_create([Series(metric=metric, engine_id=engine_id, host_id=host_id)], ignore_conflicts=True)
    lookup = {"engine_id": engine_id} if engine_id else {"host_id": host_id}
    return Series.objects.filter(metric=metric, **lookup).values_list("pk", flat=True).get()


class WriteBatch:
    """Samples and collector states gathered from several stores (a tick's host and engines,
    or several ticks') and written with one COPY (PostgreSQL; one INSERT elsewhere) and one
    upsert; `flush()` inside the caller's transaction (a caller whose transaction failed puts
    the rows back: `PendingWrites.flush`). `samples`: (series id, ts, value) rows; `states`: {CollectorState key: data}."""

    def __init__(self, series: SeriesIds) -> None:
        self.series = series
        # A row's first item is its series id, or (engine id, host id, metric) while the
        # database could not be asked for it (an outage): `resolve()` looks it up at the store.
        self.samples: list[tuple[int | tuple, datetime, float]] = []
        self.states: dict[str, dict] = {}

    def add_samples(
        self, *, ts: datetime, values: Mapping[str, object], engine: Engine | None = None, host: Host | None = None
    ) -> None:
        engine_id, host_id = getattr(engine, "pk", None), getattr(host, "pk", None)
        # While the database is known away a new series is not looked up: each lookup waited out
        # the pool's timeout (10 s) when the server refused connections, and a tick took minutes.
        away = GATE.away(max_age=float("inf"))
        for metric, raw in values.items():
            value = float(raw) if isinstance(raw, bool) else raw
            # None (not measured), NaN: absent, never a fake zero
            if isinstance(value, (int, float)) and math.isfinite(value):
                key = (engine_id, host_id, metric)
                sid: int | tuple | None = self.series.ids.get(key)
                if sid is None and not away:
                    try:
                        sid = self.series.get(metric=metric, engine_id=engine_id, host_id=host_id)
                    except DatabaseError:  # a new series while the database refuses: held all the same
                        sid = None
                self.samples.append((key if sid is None else sid, ts, float(value)))

    def resolve(self) -> None:
        """Give the samples held without their series id (see `samples`) their id, outside any
        transaction; those whose engine or host was deleted meanwhile are left out."""
        if not any(isinstance(row[0], tuple) for row in self.samples):
            return
        rows: list[tuple[int | tuple, datetime, float]] = []
        gone = set()
        for sid, ts, value in self.samples:
            if isinstance(sid, tuple):
                if sid in gone:
                    continue
                engine_id, host_id, metric = sid
                try:
                    sid = self.series.get(metric=metric, engine_id=engine_id, host_id=host_id)  # noqa: PLW2901 (the key becomes its id)
                except IntegrityError:
                    gone.add(sid)
                    continue
            rows.append((sid, ts, value))
        self.samples = rows

    def put_states(self, states: Mapping[str, dict]) -> None:
        self.states.update(states)

    def flush(self) -> None:
        if self.samples:
            samples_insert(self.samples)
        if self.states:
            states_put(self.states)
        self.samples, self.states = [], {}

    def drop_oldest(self, keep: int) -> int:
        """Keep the newest KEEP samples (they are held in the order they were read); how many went."""
        dropped = max(0, len(self.samples) - keep)
        if dropped:
            del self.samples[:dropped]
        return dropped


def samples_insert(rows: Iterable[tuple[Any, datetime, float]]) -> None:  # (series id, ts, value), ids resolved
    """Insert (series id, ts, value) ROWS. On PostgreSQL through COPY, which costs a few µs a
    row where an ORM bulk INSERT costs ~50 (the poller's CPU budget is most of the reason)."""
    if connection.vendor != "postgresql":
        Sample.objects.bulk_create(
            [Sample(series_id=sid, ts=ts, value=value) for sid, ts, value in rows], batch_size=5000
        )
        return
    table = connection.ops.quote_name(Sample._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(_column(Sample, f)) for f in ("series", "ts", "value"))
    # The raw psycopg cursor's errors become Django's (DatabaseError), as the ORM's do.
    with (
        connection.cursor() as cursor,
        connection.wrap_database_errors,
        cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy,
    ):
        for row in rows:
            copy.write_row(row)


def _column(model: type[Model], name: str) -> str:
    """The column of MODEL's field NAME (a relation's is its id's)."""
    field = model._meta.get_field(name)
    if not isinstance(field, Field) or field.column is None:
        raise LookupError(f"{model.__name__}.{name} is not a field with a column")
    return field.column


def states_put(states: Mapping[str, dict]) -> None:
    """Upsert many collector states ({key: data}) in one statement."""
    now = timezone.now()
    CollectorState.objects.bulk_create(
        [CollectorState(key=k, data=v, updated_at=now) for k, v in states.items()],
        update_conflicts=True,
        unique_fields=["key"],
        update_fields=["data", "updated_at"],
    )


def rollups_minute(*, end: datetime | None = None, lookback: timedelta = timedelta(minutes=5)) -> int:
    """Roll raw samples of complete minutes in (end - lookback, end] into 1-minute buckets."""
    end = _floor(end or timezone.now(), 60)
    rows = (
        Sample.objects.filter(ts__gte=end - lookback, ts__lt=end)
        .annotate(bucket=TruncMinute("ts"))
        .values("series_id", "bucket")
        .annotate(lo=Min("value"), avg=Avg("value"), hi=Max("value"), n=Count("id"))
    )
    return _upsert(MINUTE, [(r["series_id"], r["bucket"], r["lo"], r["avg"], r["hi"], r["n"]) for r in rows])


def rollups_hour(*, end: datetime | None = None, lookback: timedelta = timedelta(hours=3)) -> int:
    """Roll 1-minute rollups of complete hours into 1-hour buckets (count-weighted mean)."""
    end = _floor(end or timezone.now(), 3600)
    buckets: dict[tuple[int, datetime], list[float]] = {}  # (series, hour) -> [min, sum, max, count]
    minute_rows = Rollup.objects.filter(resolution=MINUTE, ts__gte=end - lookback, ts__lt=end).values_list(
        "series_id", "ts", "min", "mean", "max", "count"
    )
    for sid, ts, lo, mean, hi, n in minute_rows.iterator(chunk_size=5000):
        key = (sid, ts.replace(minute=0, second=0, microsecond=0))
        acc = buckets.setdefault(key, [math.inf, 0.0, -math.inf, 0])
        acc[0], acc[1], acc[2], acc[3] = min(acc[0], lo), acc[1] + mean * n, max(acc[2], hi), acc[3] + n
    return _upsert(HOUR, [(sid, ts, a[0], a[1] / a[3], a[2], a[3]) for (sid, ts), a in buckets.items() if a[3]])


def _upsert(resolution: int, rows: Iterable[tuple[int, datetime, float, float, float, float]]) -> int:
    objs = [
        Rollup(series_id=sid, resolution=resolution, ts=ts, min=lo, mean=mean, max=hi, count=n)
        for sid, ts, lo, mean, hi, n in rows
    ]
    Rollup.objects.bulk_create(
        objs,
        batch_size=2000,
        update_conflicts=True,
        unique_fields=["series", "resolution", "ts"],
        update_fields=["min", "mean", "max", "count"],
    )
    return len(objs)


def retention_apply(*, now: datetime | None = None, batch: int = 50000) -> int:
    """Delete raw samples past 48 h and minute rollups past 90 days, in bounded batches
    so one run never holds a long lock on a big table. Returns rows deleted."""
    now = now or timezone.now()
    deleted = _delete_batched(Sample.objects.filter(ts__lt=now - RAW_RETENTION), batch)
    deleted += _delete_batched(Rollup.objects.filter(resolution=MINUTE, ts__lt=now - MINUTE_RETENTION), batch)
    return deleted


def _delete_batched(queryset: QuerySet[Any], batch: int) -> int:
    total = 0
    while True:
        ids = list(queryset.values_list("pk", flat=True)[:batch])
        if not ids:
            return total
        total += queryset.model.objects.filter(pk__in=ids).delete()[0]


def _floor(ts: datetime, seconds: int) -> datetime:
    epoch = ts.timestamp()
    return ts - timedelta(seconds=epoch % seconds)
