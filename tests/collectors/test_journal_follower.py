"""The journal follower of the exit watch (sparkops/poller/exitwatch.py) against a real process
standing in for `journalctl -f -o json`: it keeps each unit's fatal line since the unit last
started (a CUDA line over a later generic "EngineCore died"), starts journalctl again when it
ends, and stops starting one that cannot follow until the watched units change."""

import json
import stat
import time

import pytest

from sparkops.collectors import unitnow
from sparkops.poller import exitwatch
from tests.waiting import wait_for

STARTED = "39f53479d3a045ac8e11786248231fbf"


def fake_journalctl(tmp_path, entries, *, follow=True):
    """A journalctl that prints ENTRIES as JSON lines (and a 100 kB line, over the cap), then
    follows (sleeps) or, when not FOLLOW, ends at once; each run appends its argv to runs.log."""
    lines = tmp_path / "lines.jsonl"
    lines.write_text("".join(json.dumps(e) + "\n" for e in entries) + json.dumps({"MESSAGE": "x" * 100_000}) + "\n")
    script = tmp_path / "journalctl"
    script.write_text(
        f'#!/bin/sh\necho "$@" >> {tmp_path}/runs.log\ncat {lines}\n' + ("exec sleep 600\n" if follow else "exit 2\n")
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def runs(tmp_path):
    log = tmp_path / "runs.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def follower():
    made = []

    def make():
        made.append(exitwatch.JournalFollower().start())
        return made[-1]

    yield make
    for f in made:
        f.stop()


def test_it_keeps_the_telling_fatal_line_of_the_units_current_run(tmp_path, settings, follower):
    settings.SPARKOPS_JOURNALCTL = str(
        fake_journalctl(
            tmp_path,
            [
                {"_SYSTEMD_USER_UNIT": "a.service", "MESSAGE": "RuntimeError: CUDA error: an illegal memory access"},
                {"USER_UNIT": "a.service", "MESSAGE_ID": STARTED, "MESSAGE": "Started a.service."},
                {"_SYSTEMD_USER_UNIT": "a.service", "MESSAGE": "CUDA error: an illegal instruction was encountered"},
                {"_SYSTEMD_USER_UNIT": "a.service", "MESSAGE": "EngineCore encountered a fatal error."},
                {"_SYSTEMD_UNIT": "b.service", "MESSAGE": "EngineCore encountered a fatal error."},
                {"_SYSTEMD_USER_UNIT": "a.service", "MESSAGE": "a.service: Start request repeated too quickly."},
            ],
        )
    )
    f = follower()
    f.follow(["b.service"], ["a.service"])
    assert wait_for(lambda: f.lines >= 6, timeout=30), f.lines
    assert f.cause("a.service") == (
        "CUDA error: an illegal instruction was encountered",
        "a.service: Start request repeated too quickly.",
    )
    assert f.cause("b.service")[0] == "EngineCore encountered a fatal error."
    assert f.cause("c.service") == ("", "")
    assert runs(tmp_path) == ["-f -o json -n 0 --no-pager --unit=b.service --user-unit=a.service"]
    assert f.lines == 6  # the 100 kB line was skipped, not parsed


def test_one_that_cannot_follow_is_restarted_then_left_until_the_units_change(
    tmp_path, settings, follower, monkeypatch
):
    monkeypatch.setattr(exitwatch, "RESTART_AFTER_S", 0.01)
    settings.SPARKOPS_JOURNALCTL = str(fake_journalctl(tmp_path, [], follow=False))
    f = follower()
    f.follow([], ["a.service"])
    assert wait_for(lambda: f.restarts == exitwatch.GIVE_UP_AFTER, timeout=30)
    assert len(runs(tmp_path)) == exitwatch.GIVE_UP_AFTER
    f.follow([], ["a.service", "b.service"])  # the watched units changed: it tries again
    assert wait_for(lambda: len(runs(tmp_path)) > exitwatch.GIVE_UP_AFTER, timeout=30)


def test_it_keeps_the_managers_job_messages_and_tells_when_a_run_ended(tmp_path, settings, follower):
    stopping, deactivated = "de5b426a63be47a7b6ac3eaac82e2f6f", exitwatch.SUCCESS_MESSAGE_ID
    settings.SPARKOPS_JOURNALCTL = str(
        fake_journalctl(
            tmp_path,
            [
                {"USER_UNIT": "a.service", "MESSAGE_ID": STARTED, "__REALTIME_TIMESTAMP": "1000000000"},
                {
                    "USER_UNIT": "a.service",
                    "MESSAGE_ID": stopping,
                    "JOB_TYPE": "stop",
                    "__REALTIME_TIMESTAMP": "1005000000",
                },
                {"USER_UNIT": "a.service", "MESSAGE_ID": deactivated, "__REALTIME_TIMESTAMP": "1006000000"},
                {"USER_UNIT": "d.service", "MESSAGE_ID": STARTED, "__REALTIME_TIMESTAMP": "1000000000"},
                {
                    "_SYSTEMD_USER_UNIT": "d.service",
                    "MESSAGE": "Finished server process",
                    "__REALTIME_TIMESTAMP": "1010000000",
                },
            ],
        )
    )
    f = follower()
    f.follow([], ["a.service", "d"])
    assert wait_for(lambda: f.lines >= 5, timeout=30), f.lines
    assert f.following("a.service") and f.following("d.service") and not f.following("c.service")
    entries = f.wait_for_end("a", 1001.0, time.monotonic() + 5)  # named as systemctl takes it
    assert [e["MESSAGE_ID"] for e in entries] == [STARTED, stopping, deactivated]
    job = unitnow.job_of(entries)
    assert (job.op, job.requested, job.at) == ("stop", True, 1005.0)
    # d's process said its last words at 1010 and no job was logged: an exit of its own, told at once
    assert unitnow.job_of(f.wait_for_end("d", 1001.0, time.monotonic(), spoke_after=1009.9)) is None
    # nothing told after 1011: nothing by the deadline
    assert f.wait_for_end("d.service", 1001.0, time.monotonic() + 0.3, spoke_after=1011.0) is None
    assert f.wait_for_end("a.service", 1007.0, time.monotonic()) is None  # its end is older than asked
