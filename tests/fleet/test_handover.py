"""Hand-over without double polls (issue 48 item 3), against the real Redis: the leader adopts a
box only once its worker's lease has expired, the box's worker claims it back and the leader
gives it up at its next tick; the fleet's upkeep runs on one leader at a time."""

import time

import pytest

from dashboard.models import Engine, Host
from sparkops.poller.lease import Adoptions, PollerLease, UpkeepLease
from sparkops.poller.resident import ResidentPoller
from tests.waiting import HAND_TICKED


@pytest.fixture(autouse=True)
def own_prefix(settings):
    settings.SPARKOPS_CHANNEL_PREFIX = f"handover-test-{time.monotonic_ns()}"


def asks_again(lease):
    lease.checked_at = float("-inf")  # as if RENEW_S had passed


def test_the_leader_adopts_a_box_only_when_its_lease_lapsed_and_gives_it_back_on_claim():
    box, leader = PollerLease("b-box"), Adoptions("a-box")
    assert box.holds()
    assert leader.settle({"b-box"}) == set()  # its worker still renews: the box is not adopted
    box.release()  # its worker stopped renewing (dead, or cut off from Redis for TTL_S)
    assert leader.settle({"b-box"}) == {"b-box"}
    asks_again(box)
    assert not box.holds()  # back: the adopter holds the box, so it claims it and polls nothing
    assert box.client.get(f"{box.key}:claim") == box.token.encode()
    assert leader.settle({"b-box"}) == set()  # the adopter gives it up at its next tick...
    assert leader.settle({"b-box"}) == set()  # ...and takes nothing while the claim stands
    asks_again(box)
    assert box.holds() and not box.client.exists(f"{box.key}:claim")
    assert leader.settle({"b-box"}) == set()


def test_a_box_no_longer_orphaned_is_given_up():
    leader = Adoptions("a-box")
    assert leader.settle({"b-box", "remote"}) == {"b-box", "remote"}
    assert leader.settle({"remote"}) == {"remote"}
    assert PollerLease("b-box").holds()  # its key is free again


@pytest.mark.django_db(transaction=True)
def test_the_leader_polls_only_the_boxes_it_holds(settings):
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    Host.objects.create(name="a-box", last_report_at=now)
    for name in ("b-box", "c-box"):
        host = Host.objects.create(name=name, last_report_at=now - timedelta(minutes=5))
        Engine.objects.create(name=f"{name}-engine", kind="openai", url="http://127.0.0.1:9", host=host)
    c_worker = PollerLease("c-box")
    assert c_worker.holds()  # c-box's worker reaches Redis, not the database: it keeps its box
    poller = ResidentPoller("a-box", poll_interval=HAND_TICKED, duties={}, adoptions=Adoptions("a-box"))
    poller.metrics_tick()
    assert {e.name for e in poller._polling()} == {"b-box-engine"}
    assert Engine.objects.get(name="c-box-engine").last_poll_at is None  # never polled by the leader


def test_the_upkeep_runs_on_one_leader_at_a_time():
    first, second = UpkeepLease("a-box"), UpkeepLease("b-box")
    assert first.holds() and not second.holds()
    first.ran("alerts-check-stale")
    first.forfeit()  # a-box no longer leads
    asks_again(second)
    assert second.holds()
    second.ran("alerts-check-stale")
    second.ran("live-fleet")  # every 2 s, and read by nobody: not recorded
    runs = [r.decode().split()[1:] for r in second.client.lrange(f"{second.key}:runs", 0, -1)]
    assert runs == [["b-box", "alerts-check-stale"], ["a-box", "alerts-check-stale"]]
