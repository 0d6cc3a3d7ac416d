"""Fencing (issue 48 item 3), against the real Redis and database: each taking of a box's lease
hands out a larger token, the stores carry it, and a poller that lost its lease while it held
rows (paused between its check and its store) finds them refused: it cannot overwrite the new
holder's status, by its store or by its probes."""

import time

import pytest
from django.utils import timezone

from dashboard.models import Engine, Host
from sparkops.poller import liveness
from sparkops.poller.lease import Adoptions, PollerLease
from sparkops.poller.resident import ResidentPoller
from tests.collectors.conftest import serve
from tests.collectors.test_polling import vllm_routes
from tests.waiting import HAND_TICKED, wait_for


@pytest.fixture(autouse=True)
def own_prefix(settings):
    settings.SPARKOPS_CHANNEL_PREFIX = f"fencing-test-{time.monotonic_ns()}"


class ShortLease(PollerLease):
    TTL_S = 0.3  # lapses while its holder is "paused" (a test waits for the key to go, no sleep)


@pytest.fixture
def engine_url():
    server = serve(vllm_routes("0.33.0_metrics_busy.txt"))
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_each_taking_of_a_box_hands_a_larger_token():
    box, leader = PollerLease("b-box"), Adoptions("a-box")
    assert box.holds() and box.fence == 1
    box.release()
    assert leader.settle({"b-box"}) == {"b-box"} and leader.fences == {"b-box": 2}
    assert leader.settle({"b-box"}) == {"b-box"} and leader.fences == {"b-box": 2}  # renewed: the same
    box.checked_at = float("-inf")
    assert not box.holds()  # claims it back
    assert leader.settle({"b-box"}) == set() and leader.fences == {}
    box.checked_at = float("-inf")
    assert box.holds() and box.fence == 3


def test_a_holder_counts_on_from_the_stored_fence_after_redis_lost_its_counter():
    lease = PollerLease("b-box")
    assert lease.holds() and lease.fence == 1  # Redis restarted: the host's rows carry 57
    assert lease.refence(57) == 58 and lease.fence == 58
    other = PollerLease("b-box")
    assert other.refence(58) is None  # not the holder: its refusal stands


@pytest.mark.django_db(transaction=True)
def test_a_poller_that_lost_its_lease_cannot_overwrite_the_new_holders_status(engine_url):
    host = Host.objects.create(name="spark-1")
    engine = Engine.objects.create(name="vllm-a", kind="vllm", url=engine_url, host=host)
    old = ResidentPoller(
        "spark-1", poll_interval=HAND_TICKED, flush_interval=3600, duties={}, lease=ShortLease("spark-1")
    )
    old.run_duty("metrics")  # it takes the lease (token 1) and stores its first reading at once
    engine.refresh_from_db()
    assert engine.status == "up" and Host.objects.get(pk=host.pk).fence == 1
    old.metrics_tick(engines=old.engines)  # up still: held for the next flush, which comes late (the poller stalls)
    assert old.pending.engines
    assert wait_for(lambda: not old.lease.client.exists(old.lease.key), timeout=5)  # its lease lapsed
    Engine.objects.filter(pk=engine.pk).update(url="http://127.0.0.1:9")  # the engine dies meanwhile
    new = ResidentPoller("spark-1", poll_interval=HAND_TICKED, duties={}, lease=PollerLease("spark-1"))
    assert new.lease.holds()  # the new holder: token 2
    new.metrics_tick(engines=[Engine.objects.get(pk=engine.pk)])  # stores the death at once
    engine.refresh_from_db()
    assert engine.status == "down" and new.lease.fence == 2
    stored = (engine.status_reason, engine.last_poll_at)
    old.flush()  # the stalled poller's late store: "up", under token 1
    engine.refresh_from_db()
    assert engine.status == "down" and (engine.status_reason, engine.last_poll_at) == stored
    assert Host.objects.get(pk=host.pk).fence == 2
    assert old.lease.fence == 1  # it asked for a new token, and got none: it no longer holds the box


@pytest.mark.django_db(transaction=True)
def test_a_probe_under_a_stale_token_does_not_move_the_status():
    """The probe's and the exit watch's status writes (`liveness_record`) are fenced too."""
    host = Host.objects.create(name="spark-1", fence=2)  # the new holder stored under token 2
    Engine.objects.create(name="vllm-a", kind="vllm", url="http://127.0.0.1:9", host=host, status="down")
    now = timezone.now()
    stale = liveness.liveness_record(liveness.Liveness(Engine.objects.get(), "up", "", False, now), fence=1)
    assert Engine.objects.get().status == "down"
    assert stale.changed  # as this worker saw it: its own view moves, the row does not
    liveness.liveness_record(liveness.Liveness(Engine.objects.get(), "up", "", False, now), fence=2)
    assert Engine.objects.get().status == "up"
