"""The read side of the sample store: one metric (or one engine's metrics) over a range.

Spike-preserving: whenever points are merged into a bucket, the bucket keeps its min and
max beside the mean (`y_min`, `y_max`), so an 800 MHz dip for 10 s still shows on a
7-day chart. Source choice: raw samples when the range is recent and small enough,
else 1-minute rollups, else 1-hour rollups; buckets are computed in SQL."""

import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

from django.conf import settings
from django.db import connection
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from dashboard.models import Engine, Host, Rollup, Sample, Series
from dashboard.models.samples import MINUTE_RETENTION, RAW_RETENTION

RAW_KEPT_S = RAW_RETENTION.total_seconds()
MINUTE_KEPT_S = MINUTE_RETENTION.total_seconds()
# Raw rows we are willing to aggregate in SQL before switching to rollups (~40 ms worst case).
RAW_SCAN_LIMIT = 40_000
# (series id, ISO time, mean, min, max): one point of one series as the queries return it
Row = tuple[int, str, float | None, float | None, float | None]


class Points(TypedDict):
    """One series over a range: times, bucket means, and each bucket's min and max; its source."""

    t: list[str]
    y: list[float | None]
    y_min: list[float | None]
    y_max: list[float | None]
    source: str


def _empty(source: str = "raw") -> Points:
    return {"t": [], "y": [], "y_min": [], "y_max": [], "source": source}


def series_points(
    *,
    metric: str,
    engine: Engine | None = None,
    host: Host | None = None,
    start: datetime,
    end: datetime,
    max_points: int = 2000,
) -> Points:
    """{"t": [iso], "y": [mean], "y_min": [...], "y_max": [...], "source": "raw"|"1m"|"1h"}."""
    return series_points_many(metrics=[metric], engine=engine, host=host, start=start, end=end, max_points=max_points)[
        metric
    ]


def series_points_many(
    *,
    metrics: Sequence[str],
    engine: Engine | None = None,
    host: Host | None = None,
    start: datetime,
    end: datetime,
    max_points: int = 2000,
) -> dict[str, Points]:
    """The same for several metrics of one subject in one query: {metric: points}."""
    if end <= start:
        raise ValueError("end must be after start")
    ids = _series_ids(metrics, engine, host)
    source, bucket_s = choose_source(start=start, end=end, max_points=max_points)
    out = {m: _empty(source) for m in metrics}
    if not ids:
        return out
    by_id = {sid: out[m] for m, sid in ids.items()}
    for sid, t, y, lo, hi in _query(list(by_id), source, bucket_s, start, end):
        _append(by_id[sid], t, y, lo, hi)
    if source != "raw" or bucket_s:
        _reach_the_end(by_id, source, bucket_s, end)
    return out


def _append(pts: Points, t: str, y: float | None, lo: float | None, hi: float | None) -> None:
    pts["t"].append(t)
    pts["y"].append(y)
    pts["y_min"].append(lo)
    pts["y_max"].append(hi)


def _reach_the_end(by_id: dict[int, Points], source: str, bucket_s: float, end: datetime) -> None:
    """A merged line ends at its newest data, not ~half a bucket before now (with 22-minute
    buckets, a 30-day chart would end ~10 min early). The last bucket is drawn at its newest row;
    rollups (which lag the samples by up to a rollup period) get the raw samples newer than them
    as one last point at the newest sample."""
    with_points = {sid: pts for sid, pts in by_id.items() if pts["t"]}
    if not with_points:
        return
    if bucket_s:
        table = Sample._meta.db_table if source == "raw" else Rollup._meta.db_table
        extra = "" if source == "raw" else f" AND resolution = {_resolution(source)}"
        for sid, newest in _newest(table, with_points, extra, end):
            pts = with_points[sid]
            if _as_datetime(newest) > _as_datetime(pts["t"][-1]):
                pts["t"][-1] = newest
    if source == "raw":
        return
    step = timedelta(seconds=_resolution(source))
    cutoff = {sid: _as_datetime(pts["t"][-1]) + step for sid, pts in with_points.items()}
    for sid, t, y, lo, hi in _raw_tail(cutoff, end):
        _append(with_points[sid], t, y, lo, hi)


def _resolution(source: str) -> int:
    return Rollup.Resolution.MINUTE if source == "1m" else Rollup.Resolution.HOUR


def _newest(table: str, by_id: dict[int, Points], extra: str, end: datetime) -> list[tuple[int, str]]:
    """(series id, ISO time of its newest row before END) for the series BY_ID."""
    marks = ", ".join(["%s"] * len(by_id))
    since = min(_as_datetime(pts["t"][-1]) for pts in by_id.values())
    adapt = connection.ops.adapt_datetimefield_value
    sql = (
        f"SELECT series_id, MAX(ts) FROM {table} WHERE series_id IN ({marks}) AND ts >= %s AND ts < %s{extra} "
        "GROUP BY series_id"
    )
    with connection.cursor() as cur:
        cur.execute(sql, [*by_id, adapt(since), adapt(end)])
        return [(sid, _as_datetime(t).isoformat()) for sid, t in cur.fetchall() if t is not None]


def _raw_tail(cutoff: dict[int, datetime], end: datetime) -> list[Row]:
    """One point per series from the raw samples at or after its CUTOFF (and before END): their
    mean, min and max, at the newest of them."""
    adapt = connection.ops.adapt_datetimefield_value
    where = " OR ".join(["(series_id = %s AND ts >= %s)"] * len(cutoff))
    params = [v for sid, t in cutoff.items() for v in (sid, adapt(t))]
    sql = (
        f"SELECT series_id, MAX(ts), AVG(value), MIN(value), MAX(value) FROM {Sample._meta.db_table} "
        f"WHERE ({where}) AND ts < %s GROUP BY series_id"
    )
    with connection.cursor() as cur:
        cur.execute(sql, [*params, adapt(end)])
        return [(sid, _as_datetime(t).isoformat(), y, lo, hi) for sid, t, y, lo, hi in cur.fetchall() if t is not None]


def choose_source(*, start: datetime, end: datetime, max_points: int, now: datetime | None = None) -> tuple[str, int]:
    """(source, bucket seconds or 0 for "no bucketing")."""
    now = now or timezone.now()
    span = (end - start).total_seconds()
    age = (now - start).total_seconds()
    raw_rows = span / settings.SPARKOPS_POLL_INTERVAL
    if age <= RAW_KEPT_S and raw_rows <= RAW_SCAN_LIMIT:
        return "raw", (0 if raw_rows <= max_points else _bucket(span, max_points, 1))
    if age <= MINUTE_KEPT_S:
        return "1m", (0 if span / 60 <= max_points else _bucket(span, max_points, 60))
    return "1h", (0 if span / 3600 <= max_points else _bucket(span, max_points, 3600))


def _bucket(span: float, max_points: int, step: int) -> int:
    # max_points - 1: epoch-aligned buckets can straddle both ends of the range.
    return int(math.ceil(span / max(max_points - 1, 1) / step) * step)


def _series_ids(metrics: Iterable[str], engine: Engine | None, host: Host | None) -> dict[str, int]:
    subject = {"engine": engine, "host__isnull": True} if engine is not None else {"host": host, "engine__isnull": True}
    return dict(Series.objects.filter(metric__in=metrics, **subject).values_list("metric", "pk"))


def _query(ids: list[int], source: str, bucket_s: float, start: datetime, end: datetime) -> list[Row]:
    if source == "raw":
        table, lo, mean, hi, extra = Sample._meta.db_table, "value", "value", "value", ""
    else:
        table, lo, mean, hi = Rollup._meta.db_table, "min", "mean", "max"
        extra = f" AND resolution = {Rollup.Resolution.MINUTE if source == '1m' else Rollup.Resolution.HOUR}"
    marks = ", ".join(["%s"] * len(ids))
    where = f"series_id IN ({marks}) AND ts >= %s AND ts < %s{extra}"
    adapt = connection.ops.adapt_datetimefield_value  # SQLite compares text: match Django's storage format
    params = [*ids, adapt(start), adapt(end)]
    if not bucket_s:
        sql = f"SELECT series_id, ts, {mean}, {lo}, {hi} FROM {table} WHERE {where} ORDER BY series_id, ts"
        with connection.cursor() as cur:
            cur.execute(sql, params)
            return [(sid, _as_datetime(t).isoformat(), y, lo_, hi_) for sid, t, y, lo_, hi_ in cur.fetchall()]
    if connection.vendor == "postgresql":
        # date_bin is far cheaper than numeric extract(epoch) per row; epochs come back per
        # bucket only, and one ISO string per bucket is shared by every series.
        sql = (
            f"SELECT series_id, extract(epoch from k)::bigint, y, lo, hi FROM (SELECT series_id, "
            f"date_bin('{int(bucket_s)} seconds', ts, timestamptz 'epoch') AS k, AVG({mean}) AS y, "
            f"MIN({lo}) AS lo, MAX({hi}) AS hi FROM {table} WHERE {where} GROUP BY series_id, k) b "
            f"ORDER BY series_id, k"
        )
    else:
        sql = (
            f"SELECT series_id, {_bucket_expr(bucket_s)} * {int(bucket_s)} AS k, AVG({mean}), MIN({lo}), "
            f"MAX({hi}) FROM {table} WHERE {where} GROUP BY series_id, k ORDER BY series_id, k"
        )
    with connection.cursor() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    iso: dict[int, str] = {}
    return [(sid, iso.get(k) or iso.setdefault(k, _from_epoch(k)), y, lo_, hi_) for sid, k, y, lo_, hi_ in rows]


def _bucket_expr(bucket_s: float) -> str:
    bucket_s = int(bucket_s)
    return f"(CAST(strftime('%%s', ts) AS INTEGER) / {bucket_s})"


def _as_datetime(value: Any) -> datetime:  # a datetime, or the text SQLite stores
    if isinstance(value, str):  # SQLite hands back the stored text, naive UTC
        value = parse_datetime(value)
    if timezone.is_naive(value):
        value = timezone.make_aware(value, UTC)
    return value


def _from_epoch(seconds: float) -> str:
    return datetime.fromtimestamp(int(seconds), tz=UTC).isoformat()


def latest_value(*, metric: str, engine: Engine | None = None, host: Host | None = None) -> float | None:
    """The newest raw value of one series, or None (for cards and alert rules)."""
    ids = _series_ids([metric], engine, host)
    if not ids:
        return None
    return Sample.objects.filter(series_id=ids[metric]).order_by("-ts").values_list("value", flat=True).first()
