"""Real engines under real units of the real systemd 252 user manager (issue 26): the llama.cpp
`llama-server` tests/realengine/build.sh builds, as ExecStart= of a user unit behind a readiness
helper, observed by the product (its flags with the drop-in that set each, the helper holding the
unit until /health answers, the start from the manager's timestamps). A real vLLM under a real unit
is not tested: no vLLM CPU build is installed here or in CI (it builds from source), so such a test
could only skip. Where the llama.cpp build is absent they skip, saying how to make it (SPARKOPS_REAL_ENGINES=
require: fail instead), as tests/realengine/ does."""

from __future__ import annotations

import os

import pytest
from django.conf import settings as django_settings

from tests.realengine.conftest import ALIAS, locate
from tests.waiting import wait_for

from .conftest import WAIT_S, _healthy
from .test_launch import served

pytestmark = [pytest.mark.django_db]


def _require_or_skip(reason):
    if os.environ.get("SPARKOPS_REAL_ENGINES") == "require":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture
def llama_build():
    found, reason = locate()
    if found is None:
        _require_or_skip(reason)
    return found


def test_real_llama_server_under_a_real_unit_is_observed_with_origins_readiness_and_its_start(real_box, llama_build):
    from django.utils import timezone

    from dashboard.models import Engine, Host
    from sparkops.collectors.systemd import units_show
    from sparkops.launch.observer import Observer
    from sparkops.launch.snapshot import latest_snapshot
    from sparkops.launch.starts import StartTracker, parse_timestamp

    server, model = llama_build
    box = real_box
    box.add("llama", start=False)  # the unit, then its ExecStart= replaced by the real server
    port = box.ports["llama"]
    argv = (
        f"{server} -m {model} --host 127.0.0.1 --port {port} --alias {ALIAS} --metrics --slots "
        "-np 1 --threads 1 --threads-batch 1 -c {ctx}"
    )
    box.dropin("llama", "10-server.conf", f"[Service]\nExecStart=\nExecStart={argv.format(ctx=2048)}\n")
    window = box.dropin("llama", "20-window.conf", f"[Service]\nExecStart=\nExecStart={argv.format(ctx=4096)}\n")
    # ExecStartPost=: the unit is active 2 s after /health answers (a warm-up request's time), so the
    # ticks see it activating/start-post: the tiny model loads in a tenth of a second, and on a loaded
    # box the whole start-post had passed before the first tick's `systemctl show` ran (CI).
    helper = box.helper("llama", 120, extra="--warmup 2")
    host, _ = Host.objects.get_or_create(name=django_settings.SPARKOPS_HOST_NAME)
    engine = Engine.objects.create(
        name="llama",
        kind="llamacpp",
        url=box.url("llama"),
        host=host,
        unit=box.unit("llama"),
        unit_scope="user",
        status="down",
    )
    tracker, states = StartTracker(), []

    def tick():
        props = units_show([engine.unit], scope="user")[engine.unit]
        states.append((props["ActiveState"], props["SubState"]))
        if _healthy(engine.url):
            engine.status, engine.last_ok_at = "up", timezone.now()
        tracker.track([engine], {engine.unit: props}, {})
        return served(engine).exists()

    tick()
    box.restart("llama")
    assert wait_for(tick, timeout=WAIT_S * 2, step=0.1), (states[-5:], box.show("llama"))
    assert ("activating", "start-post") in states, states  # the helper held the unit while it loaded
    props = units_show([engine.unit], scope="user")[engine.unit]
    assert (props["ActiveState"], props["SubState"], props["Restart"]) == ("active", "running", "on-failure"), props
    start = served(engine).get()
    began = min(parse_timestamp(props["InactiveExitTimestamp"]), parse_timestamp(props["ExecMainStartTimestamp"]))
    assert start.started_at == began and start.active_at == parse_timestamp(props["ActiveEnterTimestamp"]), props
    assert start.kind == "warm" and start.started_at <= start.healthy_at and start.duration_s < WAIT_S * 2
    assert start.budget_s is None  # no snapshot yet when it started: no readiness budget to hold it to
    observer = Observer()
    observer.observe([engine], host=host)
    snap = latest_snapshot(engine)
    assert snap is not None, "no snapshot of the real llama-server"
    data = snap.data
    assert data["launch"] == "unit" and data["flags"]["program"] == [str(server)], data["flags"]
    assert data["flags"]["flags"]["--ctx-size"] == "4096" and data["flags"]["origins"]["--ctx-size"] == window
    assert data["flags"]["flags"]["--port"] == str(port) and data["unit"]["drop_in_paths"][-1] == helper
    assert data["account"], data  # the server's own account (/props) read
    assert any(str(c.get("argv", [])).find("waitready") >= 0 for c in data["unit"]["exec_start_post"]), data["unit"]
    assert int(props["MainPID"]) > 0 and os.path.realpath(f"/proc/{props['MainPID']}/exe") == os.path.realpath(server)
