"""Everything that runs on a clock, in one place.

- `BEAT_SCHEDULE`: Celery beat's static entries, one commented line each. Every entry
  `expires` after its own period, so a stalled worker drops stale runs instead of piling them
  up (tests/collectors/test_commands.py checks it). Benchmark crons are not here: they live in
  the database through django-celery-beat, editable in the UI (dashboard/benchmarks/schedule.py).
- `resident_duties()`: upkeep the fleet's leading worker runs between its polls, without a
  Celery task per run (dashboard/poller/resident.py).

The polls themselves are neither: each worker's resident poller runs them on its own clock."""

from dashboard.alerts import conf as alerts_conf

ALERT_BACKSTOP_S = 30.0
BENCH_SWEEP_S = 300.0
BENCH_POSTPONED_S = 30.0


def _every(task, seconds):
    return {"task": task, "schedule": seconds, "options": {"expires": seconds}}


BEAT_SCHEDULE = {
    # 1-minute min/mean/max rollups of the last few complete minutes (idempotent upserts).
    "collectors-rollups-minute": _every("collectors.rollups_minute", 60.0),
    # 1-hour rollups from the minute rollups.
    "collectors-rollups-hour": _every("collectors.rollups_hour", 600.0),
    # Retention: raw 48 h, minute rollups 90 days, hourly for ever (dashboard/models/samples.py).
    "collectors-retention": _every("collectors.retention", 3600.0),
    # Backstop of the leader's outbox sweep below, should the leading worker's poller hang.
    "alerts-sweep-outbox": _every("alerts.sweep_outbox", ALERT_BACKSTOP_S),
    # Backstop of the leader's collector-stale check below.
    "alerts-check-stale": _every("alerts.check_stale", ALERT_BACKSTOP_S),
    # Re-notify unacknowledged critical alerts whose interval has passed.
    "alerts-renotify": _every("alerts.renotify", 30.0),
    # Fail benchmark runs left "running" by a worker that died mid-run.
    "bench-sweep-stale": _every("bench.sweep_stale", BENCH_SWEEP_S),
    # Release scheduled benchmark runs postponed while an engine of their box was starting.
    "bench-release-postponed": _every("bench.release_postponed", BENCH_POSTPONED_S),
    # The same for scheduled probe runs.
    "bench-probes-release-postponed": _every("probe.release_postponed", BENCH_POSTPONED_S),
    # Fail probe runs left "running" by a worker that died mid-run.
    "bench-probes-sweep-stale": _every("probe.sweep_stale", BENCH_SWEEP_S),
    # Fail A/B experiments left "running" by a worker that died between or during their repetitions.
    "bench-experiments-sweep-stale": _every("experiments.sweep_stale", BENCH_SWEEP_S),
}


def beat_schedule():
    return dict(BEAT_SCHEDULE)


def resident_duties():
    """name -> (interval s, callable), run by the fleet's leading worker. Every
    SPARKOPS_ALERT_SWEEP_S (5 s): a retry waits up to that much past its backoff, and a silent
    collector is flagged 6–11 s after its last report."""
    from dashboard import heartbeat
    from dashboard.alerts.evaluate import evaluate_beat
    from dashboard.alerts.outbox import sweep

    return {
        # Re-queue deliveries whose enqueue was lost or whose worker died, and retries now due.
        "alerts-sweep-outbox": (alerts_conf.sweep_interval_s(), sweep),
        # Collector-stale check: on the leader's box, apart from the other boxes it watches.
        "alerts-check-stale": (alerts_conf.sweep_interval_s(), evaluate_beat),
        # The watcher's heartbeat to an outside checker (SPARKOPS_HEARTBEAT_URL): a ping while /healthz is ok, /fail when not.
        **heartbeat.duties(),
    }
