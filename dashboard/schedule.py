"""Everything that runs on a clock, in one place.

- `BEAT_SCHEDULE`: Celery beat's static entries, one commented line each. Every entry
  `expires` after its own period, so a stalled worker drops stale runs instead of piling them
  up (tests/collectors/test_commands.py checks it). Benchmark crons are not here: they live in
  the database through django-celery-beat, editable in the UI (sparkops/benchmarks/schedule.py).
- `resident_duties()`: upkeep the fleet's leading worker runs between its polls, without a
  Celery task per run (sparkops/poller/resident.py).

The polls themselves are neither: each worker's resident poller runs them on its own clock."""

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from sparkops.alerts import conf as alerts_conf

if TYPE_CHECKING:
    from sparkops.alerts.evaluate import Memory
    from sparkops.live.presence import Viewers

ALERT_BACKSTOP_S = 30.0
BENCH_SWEEP_S = 300.0
BENCH_POSTPONED_S = 30.0


def _every(task: str, seconds: float) -> dict[str, Any]:
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


def beat_schedule() -> dict[str, dict[str, Any]]:
    return dict(BEAT_SCHEDULE)


def resident_duties(
    memory: "Memory | None" = None, viewers: "Viewers | None" = None
) -> dict[str, tuple[float, Callable[[], object]]]:
    """name -> (interval s, callable), run by the fleet's leading worker. Every
    SPARKOPS_ALERT_SWEEP_S (5 s): a retry waits up to that much past its backoff, and a silent
    collector is flagged 6–11 s after its last report. The live grid's watch holds what it last sent.
    MEMORY: the poller's alert memory, which the collector-stale check shares with the host's and
    engines' rules (on the same thread): the open alerts, rule rows and rule memories it reads
    are the ones the poller's tick keeps, not read again every 5 s (the check's own reads were 6 %
    of the leading worker's CPU). VIEWERS: the poller's answer to "is a page open?", which the
    Hosts grid's watch shares rather than ask Redis again."""
    from django.conf import settings

    from dashboard import heartbeat
    from sparkops.alerts.evaluate import evaluate_beat
    from sparkops.alerts.outbox import sweep
    from sparkops.live.fleet import FleetWatch

    return {
        # Re-queue deliveries whose enqueue was lost or whose worker died, and retries now due.
        "alerts-sweep-outbox": (alerts_conf.sweep_interval_s(), sweep),
        # Collector-stale check: on the leader's box, apart from the other boxes it watches.
        "alerts-check-stale": (alerts_conf.sweep_interval_s(), partial(evaluate_beat, memory=memory)),
        # The watcher's heartbeat to an outside checker (SPARKOPS_HEARTBEAT_URL): a ping while /healthz is ok, /fail when not.
        **heartbeat.duties(),
        # The Hosts grid's deltas: every box and engine judged, what changed sent (only while a page is open).
        "live-fleet": (settings.SPARKOPS_POLL_INTERVAL, FleetWatch(viewers=viewers).tick),
    }
