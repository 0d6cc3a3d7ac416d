"""Read side shared by benchmark and probe pages."""

from datetime import timedelta


def trend_annotations(profile, runs):
    """The change-log marks of PROFILE's engine over RUNS (oldest first), a day either side; for
    the benchmark and probe trends."""
    if not runs:
        return []
    from dashboard.changelog.selectors import chart_annotations

    start = runs[0].created_at - timedelta(days=1)
    end = runs[-1].created_at + timedelta(days=1)
    return chart_annotations(engine=profile.engine, start=start, end=end)
