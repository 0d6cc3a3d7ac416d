"""How the exit path tells a stop someone asked for from an exit 0 of the engine's own when the
journal has not said yet (issue 45; CI once paged a `systemctl restart` under load): the unit's
own timestamps, read from the real systemd 252 while its ExecStopPost= runs. A stop job leaves
the active state before its process exits; a process that exits of its own accord is stamped
first, and the unit leaves active after."""

from __future__ import annotations

import time

import pytest

from sparkops.collectors.systemd import units_show
from sparkops.poller.exits import _job_from_timestamps
from tests.waiting import wait_for

WAIT_S = 60


def _in_stop_post(box, name):
    """The unit as `systemctl show` reads it once its main process has exited and its
    ExecStopPost= runs (still loaded: a unit left inactive is collected and reads blank)."""
    seen = {}

    def read():
        seen.update(units_show([box.unit(name)], scope="user")[box.unit(name)])
        return seen.get("ActiveState") == "deactivating" and seen.get("ExecMainExitTimestamp")

    assert wait_for(read, timeout=WAIT_S, step=0.005), seen
    return dict(seen)


@pytest.mark.parametrize("how", ["stop", "exit0"])
def test_the_units_timestamps_tell_a_stop_from_an_exit_of_its_own(real_box, how):
    real_box.add("xk", service="ExecStopPost=/bin/sleep 1\n")
    if how == "stop":
        real_box.m.systemctl("stop", "--no-block", real_box.unit("xk"))
    else:
        real_box.fault("xk", "exit0")
    props = _in_stop_post(real_box, "xk")
    assert (props["ExecMainStatus"], props["Result"]) == (0, "success")  # the same exit either way
    job, decided = _job_from_timestamps(props)
    assert decided, props
    if how == "stop":
        assert job is not None and (job.op, job.requested) == ("stop", True), props
        assert abs(job.at - time.time()) < WAIT_S
    else:
        assert job is None, props


def test_a_collected_unit_decides_nothing(real_box):
    real_box.add("xc")
    real_box.m.systemctl("stop", real_box.unit("xc"))
    props = units_show([real_box.unit("xc")], scope="user")[real_box.unit("xc")]
    assert props["ActiveState"] == "inactive" and not props["InvocationID"], props  # blank: it was unloaded
    assert _job_from_timestamps(props) == (None, False)
