"""PostgreSQL stopped under a running stack: the death is paged during the outage, once, and the
record written after carries the time it was seen (issue 46, items 1-2).

A private PostgreSQL 15 cluster of the test's own (bench/outage.py's PrivatePostgres: initdb in a
temp dir, its own port, `pg_ctl stop -m fast`), `sparkops up` (web, worker, beat) on it watching a
simulated vLLM engine, and a webhook receiver on 127.0.0.1. Every wait is on an event: a row in
the database, a page at the receiver."""

import shutil
import sys
import time
from datetime import datetime

import pytest

from simulator.supervisor import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))

from outage import PG_BIN, PrivatePostgres, firing, kill_engine, start_stack, wait_for, widest_gap

FLUSH_INTERVAL_S = 10.0  # the stack's SPARKOPS_FLUSH_INTERVAL (its default)

pytestmark = [
    pytest.mark.stack,
    pytest.mark.skipif(not (PG_BIN / "initdb").exists(), reason="no PostgreSQL 15 server binaries here"),
    pytest.mark.skipif(shutil.which("runuser") is None, reason="no runuser to run PostgreSQL as postgres"),
]


@pytest.fixture
def stack_on_private_pg():
    pg = PrivatePostgres()
    stack = None
    try:
        pg.start()
        pg.create_db()
        stack, receiver = start_stack(pg.url)
        stack.register(receiver.url)
        stack.start_up()
        stack.wait_healthy(timeout=60)
        # The worker has polled and probed: its rules, channels and memories are read.
        assert wait_for(
            lambda: bool(pg.query("SELECT 1 FROM alerts_rulestate WHERE rule = 'engine_down'")), 90, step=0.2
        ), f"the worker never evaluated the engine (see {stack.dir}/up.log)"
        yield pg, stack, receiver
    finally:
        if stack is not None:
            stack.stop()
        pg.close()


def test_a_death_while_postgresql_is_down_is_paged_once_and_recorded_as_seen(stack_on_private_pg):
    pg, stack, receiver = stack_on_private_pg
    stopped = time.time()
    pg.stop()
    died = kill_engine(stack)
    assert wait_for(lambda: len(firing(receiver)) == 1, 30, step=0.05), f"no page (see {stack.dir}/up.log)"
    page = firing(receiver)[0]
    assert page["key"].startswith("sparkops-spool-") and page["body"]["rule"] == "engine_down"
    seen = datetime.fromisoformat(page["body"]["started_at"]).timestamp()
    assert 0 <= seen - died < 2.0  # seen by the worker at once (its probe runs every second)
    pg.start()
    back = time.time()
    assert wait_for(
        lambda: bool(pg.query("SELECT 1 FROM alerts_delivery WHERE idempotency_key = %s", page["key"])), 60, step=0.2
    ), "the record never caught up"
    [(started_at, state, status)] = pg.query(
        "SELECT e.started_at, e.state, d.status FROM alerts_alertevent e JOIN alerts_delivery d ON d.event_id = e.id "
        "WHERE e.rule = 'engine_down'"
    )
    assert state == "firing" and status == "sent"
    assert abs(started_at.timestamp() - seen) < 0.01  # the time it was seen, not the time of the write
    # The poller stores what it held: the engine's series has no gap wider than a store interval.
    assert wait_for(lambda: bool(pg.query("SELECT 1 FROM dashboard_engine WHERE status = 'down'")), 30, step=0.2), (
        "the engine's status was never stored"
    )

    def up_times():
        return [
            ts.timestamp()
            for (ts,) in pg.query(
                "SELECT s.ts FROM dashboard_sample s JOIN dashboard_series r ON r.id = s.series_id "
                "WHERE r.engine_id IS NOT NULL AND r.metric = 'up'"
            )
        ]

    # The first store after the return writes what was held: wait for a reading taken after it.
    assert wait_for(lambda: any(t > back for t in up_times()), 60, step=0.5), "no reading stored after the return"
    # From the last reading before the stop to the first after the return: the readings taken
    # while it was away are there (a short outage may hold one reading, or none, inside it).
    times = up_times()
    before = max((t for t in times if t <= stopped), default=stopped - FLUSH_INTERVAL_S)
    gap, count = widest_gap(times, before, min(t for t in times if t > back))
    assert count >= 2 and gap <= FLUSH_INTERVAL_S, (gap, count, back - stopped)
    assert len(firing(receiver)) == 1  # and nothing paged twice
    assert pg.query("SELECT count(*) FROM alerts_delivery WHERE transition = 'firing'") == [(1,)]
