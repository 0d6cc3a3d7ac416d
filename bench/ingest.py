"""Sustained sample inserts through the collectors' write path (dashboard.samples.store).

Each transaction is one fleet poll cycle: N engines × 14 values, gathered in one
`store.WriteBatch` and flushed exactly as a poller's metrics tick does. Target: ≥ 10,000 samples/s on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/sparkops_bench .venv/bin/python bench/ingest.py [--seconds 10] [--engines 150]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from dashboard.models import Engine, Host, Sample  # noqa: E402
from dashboard.samples import store  # noqa: E402
from sparkops.collectors.derive import SAMPLE_METRICS  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--engines", type=int, default=150)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    host, _ = Host.objects.get_or_create(name="bench-ingest")
    engines = [
        Engine.objects.get_or_create(
            name=f"bench-ingest-{i}", defaults={"kind": "vllm", "host": host, "url": f"http://127.0.0.1:{20000 + i}"}
        )[0]
        for i in range(args.engines)
    ]
    metrics = [*SAMPLE_METRICS, "up", "restarts"]
    values = {m: float(i) for i, m in enumerate(metrics)}
    start_rows = Sample.objects.count()
    written, cycles = 0, 0
    started = time.perf_counter()
    while time.perf_counter() - started < args.seconds:
        ts = timezone.now()
        batch = store.WriteBatch()
        for engine in engines:
            batch.add_samples(ts=ts, engine=engine, values=values)
        written += len(batch.samples)
        with transaction.atomic():
            batch.flush()
        cycles += 1
    elapsed = time.perf_counter() - started
    assert Sample.objects.count() - start_rows == written
    print(f"database: {connection.vendor} {connection.settings_dict['NAME']}")
    print(
        f"write path: store.WriteBatch, {len(values)} values per engine, one transaction per cycle of {len(engines)} engines"
    )
    print(f"cycles: {cycles}  samples: {written}  seconds: {elapsed:.2f}")
    print(
        f"ingest: {written / elapsed:,.0f} samples/s  ({elapsed / cycles * 1000:.1f} ms per {len(engines)}-engine cycle)"
    )
    Engine.objects.filter(host=host).delete()  # cascades to series and samples
    host.delete()


if __name__ == "__main__":
    main()
