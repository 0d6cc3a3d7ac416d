"""The journal follower of the exit watch (dashboard/poller/exitwatch.py) against a real process
standing in for `journalctl -f -o json`: it keeps each unit's fatal line since the unit last
started (a CUDA line over a later generic "EngineCore died"), starts journalctl again when it
ends, and stops starting one that cannot follow until the watched units change."""

import json
import stat

import pytest

from dashboard.poller import exitwatch
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
