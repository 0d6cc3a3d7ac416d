"""The manager's job signals (sparkops/poller/unitjobs.py) from the real systemd 252 user manager,
over its private socket: a stop or restart asked of systemd is a job that ran at the exit's
moment; an exit of the process's own is none; a watch that is not connected says it cannot tell."""

from __future__ import annotations

import os
import signal
import time

import pytest

from sparkops.poller import unitjobs
from tests.waiting import wait_for

WAIT_S = 60


@pytest.fixture
def watch(real_box):
    made = unitjobs.JobWatch("user").start()
    try:
        assert wait_for(lambda: made.connected, timeout=WAIT_S), "never connected to the user manager"
        yield made
    finally:
        made.stop()


def _main_pid(box, name):
    return int(box.show(name)["MainPID"])


@pytest.mark.parametrize("op", ["stop", "restart"])
def test_a_job_asked_of_systemd_ran_when_the_process_exited(real_box, watch, op):
    real_box.add("uj")
    unit = real_box.unit("uj")
    real_box.m.systemctl(op, unit)
    exited = time.time()  # the old process is gone once systemctl returns
    job = watch.job_at(unit, exited)
    assert job is not None and job.type == op and job.unit == unit, watch.jobs
    assert job.queued_at <= exited and job.result == "done"


def test_an_exit_of_its_own_is_no_job(real_box, watch):
    real_box.add("uk")
    unit = real_box.unit("uk")
    pid = _main_pid(real_box, "uk")
    real_box.fault("uk", "exit0")
    assert wait_for(lambda: _main_pid(real_box, "uk") != pid, timeout=WAIT_S)
    # The unit's start job ended moments ago, within the slack: a start ends no process, it is not counted.
    assert watch.job_at(unit, time.time()) is None, watch.jobs
    seen = [j for j in watch.jobs.values() if j.unit == unit]
    # it saw the unit's own start job (over before its type could be asked, or a start), and only that
    assert len(seen) == 1 and seen[0].type in ("", "start") and seen[0].ended_at is not None, seen


def test_a_watch_that_is_not_connected_cannot_tell(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # no manager there
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    made = unitjobs.JobWatch("user").start()
    try:
        with pytest.raises(unitjobs.Unknown):
            made.job_at("x.service", time.time())
    finally:
        made.stop()


def test_systemds_own_restart_after_a_crash_is_no_job_asked_for(real_box, watch):
    real_box.add("ul", restart="on-failure", unit_opts={"restart_sec": 0.1})
    unit = real_box.unit("ul")
    pid = _main_pid(real_box, "ul")
    killed = time.time()
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: _main_pid(real_box, "ul") not in (0, pid), timeout=WAIT_S)  # Restart= brought it back
    assert watch.job_at(unit, killed) is None, watch.jobs  # its start job came after the exit
    assert any(j.unit == unit and j.queued_at > killed for j in watch.jobs.values()), watch.jobs  # and was seen
