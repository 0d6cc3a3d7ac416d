"""History queries on PostgreSQL over 30 days of samples for three engines and one host at 2 s
(60 series), stored as the retention policy keeps them: raw for the last 48 h, 1-minute
rollups for 30 days, 1-hour rollups. Data is generated server-side (generate_series), with
a short dip every few hours so the spike-preserving downsampling has something to keep.

Prints, per query, the server-side execution time (EXPLAIN ANALYZE) and the wall time of
the selector call (SQL + Python), median of --repeat runs. Targets: 7-day series of one
metric ≤ 2,000 points ≤ 20 ms; one engine's ~15 metrics for 7 days ≤ 100 ms; last hour of
one metric from raw samples ≤ 10 ms.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/sparkops_bench .venv/bin/python bench/history_query.py [--raw-hours 48]
"""

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from dashboard.models import Engine, Host, Rollup, Sample, Series  # noqa: E402
from dashboard.selectors import series as sel  # noqa: E402
from sparkops.collectors.derive import SAMPLE_METRICS  # noqa: E402

HOST_METRICS = (
    "mem_available_bytes",
    "mem_used_bytes",
    "swap_used_bytes",
    "psi.memory.some.avg10",
    "psi.memory.full.avg10",
    "psi.cpu.some.avg10",
    "psi.io.some.avg10",
    "psi.memory.some.avg60",
    "compilers",
    "compilers_rss_bytes",
    "gpu0.sm_clock_mhz",
    "gpu0.sm_clock_max_mhz",
    "gpu0.utilization_pct",
    "gpu0.power_w",
    "gpu0.temperature_c",
)
ENGINE_METRICS = tuple(dict.fromkeys((*SAMPLE_METRICS, "up", "restarts", "spec_acceptance_rate")))[:15]
VALUE = "2400 - 1600 * (random() < 0.0005)::int + 50 * sin(extract(epoch from t) / 600)"


def build(now, raw_hours, days):
    host, _ = Host.objects.get_or_create(name="bench-history")
    engines = [
        Engine.objects.get_or_create(
            name=f"bench-history-{i}", defaults={"kind": "vllm", "host": host, "url": f"http://127.0.0.1:{21000 + i}"}
        )[0]
        for i in range(3)
    ]
    series = [Series.objects.get_or_create(host=host, metric=m)[0] for m in HOST_METRICS]
    series += [Series.objects.get_or_create(engine=e, metric=m)[0] for e in engines for m in ENGINE_METRICS]
    ids = [s.pk for s in series]
    if Sample.objects.filter(series_id__in=ids).exists():
        return engines, host, ids, False
    end = now.replace(second=0, microsecond=0)
    with connection.cursor() as cur:
        t0 = time.perf_counter()
        cur.execute(
            f"""INSERT INTO {Sample._meta.db_table} (series_id, ts, value)
            SELECT s, t, {VALUE} FROM unnest(%s::bigint[]) s,
            generate_series(%s::timestamptz, %s::timestamptz, interval '2 seconds') t""",
            [ids, end - timedelta(hours=raw_hours), end],
        )
        print(f"raw samples: {cur.rowcount:,} in {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        cur.execute(
            f"""INSERT INTO {Rollup._meta.db_table} (series_id, resolution, ts, min, mean, max, count)
            SELECT s, 60, t, v - 30 - 1600 * (random() < 0.015)::int, v, v + 30, 30 FROM unnest(%s::bigint[]) s,
            generate_series(%s::timestamptz, %s::timestamptz, interval '1 minute') t,
            LATERAL (SELECT 2400 + 50 * sin(extract(epoch from t) / 600) AS v) x""",
            [ids, end - timedelta(days=days), end - timedelta(minutes=1)],
        )
        print(f"1-minute rollups: {cur.rowcount:,} in {time.perf_counter() - t0:.1f} s")
        cur.execute(
            f"""INSERT INTO {Rollup._meta.db_table} (series_id, resolution, ts, min, mean, max, count)
            SELECT series_id, 3600, date_trunc('hour', ts), min(min), avg(mean), max(max), sum(count)
            FROM {Rollup._meta.db_table} WHERE resolution = 60 AND series_id = ANY(%s) GROUP BY 1, 3""",
            [ids],
        )
        print(f"1-hour rollups: {cur.rowcount:,}")
        cur.execute(f"ANALYZE {Sample._meta.db_table}; ANALYZE {Rollup._meta.db_table}")
    return engines, host, ids, True


def server_ms(fn):
    """Execution time PostgreSQL reports for every statement `fn` runs (EXPLAIN ANALYZE)."""
    captured = []

    def explain(execute, sql, params, many, context):
        if sql.lstrip().upper().startswith("SELECT"):  # the series lookup and the points query
            with connection.cursor() as cur:
                cur.cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
                captured.append(cur.cursor.fetchone()[0][0]["Execution Time"])
        return execute(sql, params, many, context)

    with connection.execute_wrapper(explain):
        fn()
    return sum(captured)


def measure(label, fn, repeat, target_ms):
    fn()  # warm the cache as a page that is being looked at would be
    walls, servers = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        walls.append((time.perf_counter() - t0) * 1000)
    for _ in range(min(repeat, 5)):
        servers.append(server_ms(fn))
    points = result["points"]
    print(
        f"{label:<48} server {statistics.median(servers):6.1f} ms   wall {statistics.median(walls):6.1f} ms   "
        f"points {points:>6}  source {result['source']:<3} (target ≤ {target_ms} ms)"
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--raw-hours", type=float, default=48)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    now = timezone.now()
    engines, host, ids, _built = build(now, args.raw_hours, args.days)
    print(
        f"database: {connection.vendor} {connection.settings_dict['NAME']}; series: {len(ids)}; "
        f"raw rows: {Sample.objects.filter(series_id__in=ids).count():,}; "
        f"rollup rows: {Rollup.objects.filter(series_id__in=ids).count():,}"
    )
    engine = engines[0]
    week = dict(start=now - timedelta(days=7), end=now)

    def one_metric_week():
        pts = sel.series_points(metric="generation_tokens_per_s", engine=engine, **week)
        return {"points": len(pts["t"]), "source": pts["source"]}

    def engine_week():
        got = sel.series_points_many(metrics=list(ENGINE_METRICS), engine=engine, **week)
        return {"points": sum(len(p["t"]) for p in got.values()), "source": next(iter(got.values()))["source"]}

    def last_hour():
        pts = sel.series_points(metric="gpu0.sm_clock_mhz", host=host, start=now - timedelta(hours=1), end=now)
        return {"points": len(pts["t"]), "source": pts["source"]}

    measure("7-day series, one metric (≤2,000 points)", one_metric_week, args.repeat, 20)
    measure(f"7-day series, all {len(ENGINE_METRICS)} metrics of one engine", engine_week, args.repeat, 100)
    measure("last hour, one metric, raw samples", last_hour, args.repeat, 10)
    spike = sel.series_points(metric="gpu0.sm_clock_mhz", host=host, **week)
    print(f"spike kept in 7-day chart: min(y_min)={min(spike['y_min']):.0f} MHz vs min(y)={min(spike['y']):.0f} MHz")


if __name__ == "__main__":
    main()
