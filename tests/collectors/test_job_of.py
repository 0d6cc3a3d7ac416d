"""`unitnow.job_of`: what the manager's job messages in a unit's journal say began or ended its run,
on entries shaped as systemd 252 writes them (MESSAGE_ID, JOB_TYPE, __REALTIME_TIMESTAMP; the same
sequences tests/realsystemd/test_planned.py produces on the real manager)."""

from sparkops.collectors.unitnow import (
    RESTART_MESSAGE_ID,
    STARTED_MESSAGE_ID,
    STOPPED_MESSAGE_ID,
    STOPPING_MESSAGE_ID,
    job_of,
)


def entry(at, message_id=None, job_type=None, text="a line of the engine"):
    e = {"__REALTIME_TIMESTAMP": str(int(at * 1e6)), "MESSAGE": text}
    if message_id:
        e["MESSAGE_ID"] = message_id
    if job_type:
        e["JOB_TYPE"] = job_type
    return e


STARTED = (STARTED_MESSAGE_ID, "start")


def test_a_stop_asked_for_ends_the_run():
    job = job_of(
        [entry(10, *STARTED), entry(11), entry(20, STOPPING_MESSAGE_ID, "stop"), entry(21, STOPPED_MESSAGE_ID, "stop")]
    )
    assert (job.op, job.requested, job.pending, job.at) == ("stop", True, False, 20.0)
    assert job.text.startswith("systemctl stop, ")


def test_a_restart_whose_start_has_not_said_started_is_pending():
    job = job_of(
        [entry(10, *STARTED), entry(20, STOPPING_MESSAGE_ID, "stop"), entry(21, STOPPED_MESSAGE_ID, "restart")]
    )
    assert (job.op, job.requested, job.pending) == ("restart", True, True)


def test_a_run_that_began_after_a_requested_stop_is_a_restart():
    job = job_of(
        [entry(10, *STARTED), entry(20, STOPPING_MESSAGE_ID, "stop"), entry(21, STOPPED_MESSAGE_ID, "restart"),
         entry(21.5, *STARTED), entry(22)]
    )  # fmt: skip
    assert (job.op, job.requested, job.pending, job.at) == ("restart", True, False, 20.0)


def test_a_run_systemd_restarted_itself_is_not_requested():
    job = job_of(
        [
            entry(10, *STARTED),
            entry(20, RESTART_MESSAGE_ID),
            entry(20.1, STOPPED_MESSAGE_ID, "restart"),
            entry(20.5, *STARTED),
        ]
    )
    assert (job.op, job.requested) == ("restart", False)
    assert job.text.startswith("Restart= by systemd")


def test_an_exit_of_its_own_has_no_job():
    assert job_of([entry(10, *STARTED), entry(11, text="CUDA error: an illegal instruction was encountered")]) is None
    assert job_of([entry(11)]) is None  # nothing of the manager's in sight
