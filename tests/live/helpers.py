"""Write samples the way the collectors store them (Series/Sample/Rollup rows)."""

from datetime import timedelta

from dashboard.models import Rollup, Sample, Series


def add_samples(*, metric, values, end, step_s=2.0, engine=None, host=None):
    """VALUES at STEP_S apart, the last one at END."""
    series, _ = Series.objects.get_or_create(metric=metric, engine=engine, host=host)
    n = len(values)
    Sample.objects.bulk_create(
        Sample(series=series, ts=end - timedelta(seconds=step_s * (n - 1 - i)), value=v) for i, v in enumerate(values)
    )
    return series


def add_minute_rollups(*, metric, start, minutes, value, spike_at=None, spike=None, engine=None, host=None):
    series, _ = Series.objects.get_or_create(metric=metric, engine=engine, host=host)
    start = start.replace(second=0, microsecond=0)
    rows = []
    for i in range(minutes):
        hi = spike if i == spike_at else value
        rows.append(
            Rollup(
                series=series, resolution=60, ts=start + timedelta(minutes=i), min=value, mean=value, max=hi, count=30
            )
        )
    Rollup.objects.bulk_create(rows, batch_size=5000)
    return series
