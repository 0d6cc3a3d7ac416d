"""Write samples the way the collectors store them (Series/Sample/Rollup rows); log a user in for a
browser or a socket (`session_key`)."""

from datetime import timedelta

from django.conf import settings
from django.test import Client

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


def session_key(user):
    """The key of a new logged-in session for USER, stored where the web server reads sessions (the
    test database): what the login form would have set in the browser's session cookie."""
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value
