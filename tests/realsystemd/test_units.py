"""Engines under real systemd units (and the same under the simulator's systemd), read through the
product's own code: the collectors (`systemctl --user show`, `journalctl --user-unit`), the
engine_down rule's causes, launch observation (`read_units`), the Restart action."""

import pytest

from dashboard.alerts.evaluate import evaluate
from dashboard.alerts.models import AlertEvent
from dashboard.collectors import unitconfig
from dashboard.collectors.systemd import journal_read, units_show
from tests.waiting import wait_for

from .conftest import WAIT_S

pytestmark = [pytest.mark.xdist_group("realsystemd"), pytest.mark.django_db]


def shown(box, name, **want):
    """Until the unit's properties (the product's `systemctl show`) match WANT; the last reading."""
    seen = {}

    def match():
        seen.update(units_show([box.unit(name)], scope="user")[box.unit(name)])
        return all(str(seen.get(k)) == str(v) for k, v in want.items())

    assert wait_for(match, timeout=WAIT_S), f"{box.kind}: {box.unit(name)} never reached {want}: {seen}"
    return seen


def down_event(engine):
    evaluate("engine_liveness", engine=engine, up=False, reason="connection refused", rechecked=False)
    evaluate("engine_liveness", engine=engine, up=False, reason="connection refused", rechecked=True)
    return AlertEvent.objects.get(rule="engine_down", subject=engine.name, state="firing")


def test_exit0_under_restart_on_failure_is_exit0_no_restart_with_the_cuda_line(box, engine_of):
    box.add("ex0", restart="on-failure")
    engine = engine_of(box, "ex0")
    pid = shown(box, "ex0", ActiveState="active")["MainPID"]
    box.fault("ex0", "exit0")
    props = shown(box, "ex0", ActiveState="inactive", SubState="dead")
    assert props["Result"] == "success" and props["ExecMainStatus"] == 0 and props["NRestarts"] == 0
    assert props["MainPID"] == 0 and pid
    event = down_event(engine)
    assert event.cause == "exit0_no_restart", event.message
    assert "Restart=on-failure, so systemd will not restart it" in event.message
    assert "CUDA error: an illegal instruction was encountered" in event.message


def test_restart_always_in_a_drop_in_restarts_and_counts(box, engine_of):
    box.add("alw", restart="on-failure")
    engine = engine_of(box, "alw")
    box.dropin("alw", "50-always.conf", "[Service]\nRestart=always\n")
    first = shown(box, "alw", ActiveState="active", Restart="always")["MainPID"]
    box.fault("alw", "exit0")
    again = shown(box, "alw", ActiveState="active", NRestarts=1)
    assert again["MainPID"] not in (0, first)
    box.wait_ready("alw")
    entries, _ = journal_read(user_units=[box.unit("alw")], first_lines=500)
    texts = [e.get("MESSAGE") for e in entries]
    assert "Scheduled restart job, restart counter is at 1." in " ".join(str(t) for t in texts), texts
    assert any("illegal instruction" in str(t) for t in texts)
    evaluate("engine_liveness", engine=engine, up=True, reason="")
    assert not AlertEvent.objects.filter(rule="engine_down", state="firing").exists()


def test_a_later_drop_in_that_resets_exec_start_is_the_flags_origin(box, engine_of):
    box.add("dro")
    engine = engine_of(box, "dro")
    port = box.url("dro").rsplit(":", 1)[1]
    if box.kind == "real":
        text = f"[Service]\nExecStart=\nExecStart={box.engine_argv('dro', max_model_len=4096)}\n"
    else:
        text = (
            "[Service]\nExecStart=\nExecStart=/opt/vllm/bin/vllm serve Qwen/Qwen3-8B --host 127.0.0.1 "
            f"--port {port} --max-model-len 4096\n"
        )
    box.dropin("dro", "10-first.conf", text.replace("4096", "2048"))
    path = box.dropin("dro", "90-window.conf", text)
    config = unitconfig.read_units([engine])[engine.pk]
    assert "error" not in config, config
    argv, origins = config["exec_start"]["argv"], config["exec_start"]["origins"]
    at = argv.index("--max-model-len")
    assert argv[at + 1] == "4096" and origins[at] == origins[at + 1] == path, (argv, origins)
    assert config["drop_in_paths"][-1] == path and not config["need_daemon_reload"]
    # edited on disk without daemon-reload: systemd says so
    box.dropin("dro", "95-edit.conf", "[Service]\nEnvironment=EDITED=1\n", reload=False)
    shown(box, "dro", LoadState="loaded")
    config = unitconfig.read_units([engine])[engine.pk]
    assert config["need_daemon_reload"], config


def test_journal_lines_of_a_user_unit_are_credited_to_it(box, engine_of):
    """A --user unit's lines name the user manager's service in _SYSTEMD_UNIT (user@0.service):
    the collectors credit them to the engine's unit, fatal lines and boot facts alike."""
    from dashboard.collectors import hostread

    box.add("jrn")
    engine = engine_of(box, "jrn")
    box.fault("jrn", "exit0")
    shown(box, "jrn", ActiveState="inactive")
    entries, _ = journal_read(user_units=[box.unit("jrn")], first_lines=500)
    assert entries and {systemd_entry_unit(e) for e in entries} == {box.unit("jrn")}
    new_state, fatal = {"contract": {}}, {}
    hostread._journal_source("units", [engine], {}, new_state, fatal)
    assert set(fatal) == {box.unit("jrn")}, fatal
    assert any("illegal instruction" in line["message"] for line in fatal[box.unit("jrn")])
    assert new_state["boot"][box.unit("jrn")]["pool_tokens"] > 0


def systemd_entry_unit(entry):
    from dashboard.collectors.systemd import entry_unit

    return entry_unit(entry)
