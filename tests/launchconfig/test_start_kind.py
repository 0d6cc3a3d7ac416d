"""A start's kind is what the worker saw (issue 47 item 2): cold when compilers ran in the unit,
warm only when the worker watched the whole start and none did, unknown when the start was made
while the worker was down (no compiler seen proves nothing: it may have compiled before the worker
looked). No cold/warm budget is learned from a start of unknown kind.

The product's StartTracker on the real database, fed `systemctl show` properties as the poller
reads them; systemctl and journalctl are commands that fail (no gate's line to read), as on a box
whose journal is not readable."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def no_journal(tmp_path, settings):
    for name in ("systemctl", "journalctl"):
        command = tmp_path / name
        command.write_text("#!/bin/sh\nexit 1\n")
        command.chmod(0o755)
        setattr(settings, f"SPARKOPS_{name.upper()}", str(command))


def stamp(epoch):
    return f"@{epoch:.6f}"


def unit(state, began=None, active=None):
    props = {"ActiveState": state}
    if began is not None:
        props.update(InactiveExitTimestamp=stamp(began), ExecMainStartTimestamp=stamp(began + 0.001))
    if active is not None:
        props["ActiveEnterTimestamp"] = stamp(active)
    return props


def answered(engine, at=None):
    engine.status = "up" if at else "down"
    engine.last_ok_at = datetime.fromtimestamp(at, tz=UTC) if at else None


def test_a_start_made_while_the_worker_was_down_is_of_unknown_kind_and_teaches_no_budget(no_journal):
    from dashboard.models import Engine, EngineStart, Host
    from sparkops.controls.unitfix_checks import BUDGET_UNMEASURED_S, readiness_budget_s
    from sparkops.launch.starts import StartTracker, restart_budget

    host = Host.objects.create(name="box-kind")
    unseen, watched, compiled, died = (
        Engine.objects.create(
            name=name, kind="vllm", url=f"http://127.0.0.1:{port}", host=host, unit=f"{name}.service", status="down"
        )
        for name, port in (("unseen", 18101), ("watched", 18102), ("compiled", 18103), ("died", 18104))
    )
    tracker = StartTracker()
    now = tracker.since
    answered(unseen, now + 1)  # served long before the worker came: a gated cold start or a warm one, unseen
    answered(watched)
    answered(compiled)
    answered(died)
    tracker.track(
        [unseen, watched, compiled, died],
        {
            unseen.unit: unit("active", began=now - 90, active=now - 5),
            watched.unit: unit("inactive"),
            compiled.unit: unit("activating", began=now - 30),  # still compiling when the worker looks
            died.unit: unit("activating", began=now - 30),
        },
        {"compiler_procs": [{"unit": compiled.unit, "pid": 4242, "name": "nvcc"}]},
    )
    answered(watched, now + 20)
    answered(compiled, now + 20)
    tracker.track(
        [watched, compiled, died],
        {
            watched.unit: unit("active", began=now + 10, active=now + 19),  # seen from its beginning
            compiled.unit: unit("active", began=now - 30, active=now + 19),
            died.unit: unit("failed", began=now - 30),
        },
        {"compiler_procs": []},
    )

    kinds = {s.engine.name: s.kind for s in EngineStart.objects.select_related("engine")}
    assert kinds == {"unseen": "unknown", "watched": "warm", "compiled": "cold", "died": "unknown"}, kinds
    assert EngineStart.objects.get(engine=died).healthy_at is None  # a failed start, counted, of no kind
    assert restart_budget(unseen)["classes"] == {} and restart_budget(died)["classes"] == {}
    assert readiness_budget_s(unseen)[0] == BUDGET_UNMEASURED_S, readiness_budget_s(unseen)
    learned = restart_budget(watched)["classes"]
    assert set(learned) == {"warm"} and learned["warm"]["n"] == 1 and learned["warm"]["max"] < 11, learned
    assert time.time() - now < 60  # nothing above waited on a clock
