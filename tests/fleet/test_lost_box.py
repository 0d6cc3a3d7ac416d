"""A lost box is one incident (issue 48 item 2): the leader that adopts a box whose worker stopped
reporting shows its silent engines as unknown and pages nothing for them, never naming a systemd
cause it could not read; an engine with no box of its own (a remote endpoint) still pages."""

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.models import Engine, Host
from sparkops.alerts.models import AlertEvent
from sparkops.alerts.rules.host import CollectorStale
from sparkops.poller.resident import ResidentPoller
from tests.waiting import HAND_TICKED

pytestmark = pytest.mark.django_db(transaction=True)
STALE_UNIT = {"ActiveState": "active", "SubState": "running", "InvocationID": "abc", "NRestarts": "0"}


@pytest.fixture
def lost_box():
    """a-box (this worker, the leader), b-box (reported 5 min ago: lost), remote (never reported).
    b-box's engine kept the unit its own worker last read: active, which the leader cannot see."""
    now = timezone.now()
    hosts = {
        name: Host.objects.create(name=name, last_report_at=report)
        for name, report in (("a-box", now), ("b-box", now - timedelta(minutes=5)), ("remote", None))
    }
    engines = {
        name: Engine.objects.create(
            name=f"{name}-engine",
            kind="openai",
            url="http://127.0.0.1:9",  # nothing listens: refused, as through a cut link
            host=host,
            status="up",
            unit=f"{name}.service" if name != "remote" else "",
            latest={"unit": STALE_UNIT, "status": "up"} if name != "remote" else {"status": "up"},
        )
        for name, host in hosts.items()
        if name != "a-box"
    }
    return hosts, engines


def probed_twice(poller):
    poller._read_roles_if_due()
    for _ in range(2):
        poller.probe_tick()


def test_a_lost_boxs_engine_is_unknown_and_pages_nothing_a_remote_one_pages(lost_box):
    lost_box  # noqa: B018 (the fixture makes the fleet)
    poller = ResidentPoller("a-box", poll_interval=HAND_TICKED, duties={})
    probed_twice(poller)
    assert {e.name for e in poller.engines} == {"b-box-engine", "remote-engine"}  # both adopted
    lost = Engine.objects.get(name="b-box-engine")
    assert lost.status == "unknown"
    assert (
        lost.status_reason.startswith("box b-box unreachable since ") and "its state is unknown" in lost.status_reason
    )
    assert not AlertEvent.objects.filter(engine=lost).exists()  # the box's page stands for it
    remote = AlertEvent.objects.get(engine__name="remote-engine", rule="engine_down")
    assert remote.state == "firing"  # no box of its own: paged as before
    assert "connection refused" in remote.message


def test_a_lost_boxs_engine_polled_for_metrics_is_unknown_too(lost_box):
    poller = ResidentPoller("a-box", poll_interval=HAND_TICKED, duties={})
    poller.metrics_tick()
    poller.flush()
    assert Engine.objects.get(name="b-box-engine").status == "unknown"
    assert Engine.objects.get(name="remote-engine").status == "down"


def test_the_box_is_one_page_that_says_its_engines_are_unknown(lost_box):
    lost_box  # noqa: B018
    findings = {f.subject: f for f in CollectorStale().evaluate(settings=CollectorStale.DEFAULTS)}
    lost = findings["b-box/collector"]
    assert lost.active and not findings["a-box/collector"].active
    assert lost.message.startswith("Box b-box unreachable since ") and "its engines' state is unknown" in lost.message
