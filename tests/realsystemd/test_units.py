"""Engines under real systemd units (and the same under the simulator's systemd), read through the
product's own code: the collectors (`systemctl --user show`, `journalctl --user-unit`), the
engine_down rule's causes, launch observation (`read_units`), the Restart action."""

import re
import shlex
import subprocess

import pytest

from dashboard.systemctl_show import unit_props
from sparkops.alerts.evaluate import evaluate
from sparkops.alerts.models import AlertEvent
from sparkops.collectors import unitconfig
from sparkops.collectors.systemd import journal_read, units_show
from sparkops.collectors.unitnow import unit_now
from tests.waiting import wait_for

from .conftest import WAIT_S

pytestmark = [pytest.mark.django_db]


def shown(box, name, **want):
    """Until the unit's properties (the product's `systemctl show`) match WANT; the last reading."""
    seen = {}

    def match():
        seen.update(units_show([box.unit(name)], scope="user")[box.unit(name)])
        return all(str(seen.get(k)) == str(v) for k, v in want.items())

    assert wait_for(match, timeout=WAIT_S), f"{box.kind}: {box.unit(name)} never reached {want}: {seen}"
    return seen


def journal_texts(box, name, *want):
    """The MESSAGEs of NAME's unit in the journal, once every line of WANT is there (journald writes
    the manager's lines a moment after `systemctl show` has the state they tell of)."""
    texts: list = []

    def read():
        entries, _ = journal_read(user_units=[box.unit(name)], first_lines=500)
        texts[:] = [str(e.get("MESSAGE")) for e in entries]
        return all(w in texts for w in want)

    assert wait_for(read, timeout=WAIT_S), (want, texts)
    return texts


def journal_holding(box, name, *parts):
    """The MESSAGEs of NAME's unit once each of PARTS is in one of them: journald takes a process's
    stdout from its stream a moment after systemd has reported the state that followed."""
    texts: list = []

    def read():
        entries, _ = journal_read(user_units=[box.unit(name)], first_lines=500)
        texts[:] = [str(e.get("MESSAGE")) for e in entries]
        return all(any(p in t for t in texts) for p in parts)

    assert wait_for(read, timeout=WAIT_S), (parts, texts)
    return texts


def down_event(engine):
    """Two failed probes of ENGINE, each with its unit read as the probe step reads it."""
    for rechecked in (False, True):
        evaluate(
            "engine_liveness",
            engine=engine,
            up=False,
            reason="connection refused",
            rechecked=rechecked,
            unit_now=unit_now(engine),
        )
    return AlertEvent.objects.get(rule="engine_down", subject=engine.name, state="firing")


def test_exit0_under_restart_on_failure_is_exit0_no_restart_with_the_cuda_line(box, engine_of):
    box.add("ex0", restart="on-failure")
    engine = engine_of(box, "ex0")
    pid = shown(box, "ex0", ActiveState="active")["MainPID"]
    box.fault("ex0", "exit0")
    props = shown(box, "ex0", ActiveState="inactive", SubState="dead")
    assert props["Result"] == "success" and props["ExecMainStatus"] == 0 and props["NRestarts"] == 0
    assert props["MainPID"] == 0 and pid
    raw = box.show("ex0")  # collected: the manager forgot the run (real systemd 252 and the simulator alike)
    assert raw["ExecMainPID"] == raw["ExecMainCode"] == "0" and not raw.get("ExecMainStartTimestamp"), raw
    assert not (raw.get("InvocationID") or raw.get("ControlGroup") or raw.get("ActiveEnterTimestamp")), raw
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
    journal_holding(box, "alw", "Scheduled restart job, restart counter is at 1.", "illegal instruction")
    evaluate("engine_liveness", engine=engine, up=True, reason="", unit_now=unit_now(engine))
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
    from sparkops.collectors import hostread

    box.add("jrn")
    engine = engine_of(box, "jrn")
    box.fault("jrn", "exit0")
    shown(box, "jrn", ActiveState="inactive")
    journal_holding(box, "jrn", "illegal instruction")  # the engine's last line, written before it exited
    entries, _ = journal_read(user_units=[box.unit("jrn")], first_lines=500)
    assert entries and {systemd_entry_unit(e) for e in entries} == {box.unit("jrn")}
    new_state, fatal = {"contract": {}}, {}
    hostread._journal_source("units", [engine], {}, new_state, fatal)
    assert set(fatal) == {box.unit("jrn")}, fatal
    assert any("illegal instruction" in line["message"] for line in fatal[box.unit("jrn")])
    assert new_state["boot"][box.unit("jrn")]["pool_tokens"] > 0


def systemd_entry_unit(entry):
    from sparkops.collectors.systemd import entry_unit

    return entry_unit(entry)


def test_start_limit_hit_then_the_restart_action_brings_it_back(box, engine_of, settings):
    """Restart=always, StartLimitBurst=2: the third start inside StartLimitIntervalSec= is refused —
    "Start request repeated too quickly", failed with Result=start-limit-hit (the runs before it ended
    well); the card gives `reset-failed`, and the Restart action (reset-failed, then restart, by the
    real `systemctl --user`) brings it back."""
    from dashboard.unit_actions import fix_commands, unit_restart
    from sparkops.changelog.models import Entry

    box.add(
        "slh", restart="always", unit_opts={"restart_sec": 0.1, "start_limit_burst": 2, "start_limit_interval": 300}
    )
    engine = engine_of(box, "slh")
    box.fault("slh", "exit0")
    shown(box, "slh", ActiveState="active", NRestarts=1)
    box.wait_ready("slh")
    box.fault("slh", "exit0")
    props = shown(box, "slh", ActiveState="failed")
    assert props["Result"] == "start-limit-hit" and props["SubState"] == "failed" and props["NRestarts"] == 2, props
    texts = journal_texts(
        box,
        "slh",
        f"{box.unit('slh')}: Start request repeated too quickly.",
        f"{box.unit('slh')}: Failed with result 'start-limit-hit'.",
    )
    assert f"{box.unit('slh')}: Start request repeated too quickly." in texts, texts
    assert f"{box.unit('slh')}: Failed with result 'start-limit-hit'." in texts, texts
    event = down_event(engine)
    assert event.cause == "start_limit_hit", event.message
    assert (
        "After “start request repeated too quickly” (start limit hit)",
        f"systemctl --user reset-failed {box.unit('slh')} && systemctl --user start {box.unit('slh')}",
    ) in fix_commands(engine)
    plain = subprocess.run(
        [*shlex.split(settings.SPARKOPS_SYSTEMCTL), "--user", "restart", box.unit("slh")],
        capture_output=True,
        text=True,
        check=False,
    )  # refused while the limit holds
    assert plain.returncode == 1 and "start of the service was attempted too often" in plain.stderr, plain.stderr
    settings.SPARKOPS_UNIT_ACTIONS = True
    unit_restart(engine.pk, event.pk, None)
    note = Entry.objects.filter(kind="incident_note").order_by("-pk").first()
    assert note is not None and note.title == f"systemctl restart {box.unit('slh')} on {engine.host.name}: done", note
    again = shown(box, "slh", ActiveState="active", SubState="running")
    assert again["NRestarts"] == 0 and again["Result"] == "success" and again["MainPID"] not in (0, "0")
    box.wait_ready("slh")


def test_a_crash_loop_past_the_start_limit_keeps_result_exit_code(box, engine_of):
    """The same limit hit by a crash loop: systemd keeps the first failure's Result (exit-code), and only
    the journal says the start limit was hit — which engine_down reads, so the cause is start_limit_hit
    (not a plain unit_failed) and the card gives `reset-failed`."""
    from dashboard.unit_actions import fix_commands

    box.add(
        "slc", restart="on-failure", unit_opts={"restart_sec": 0.1, "start_limit_burst": 2, "start_limit_interval": 300}
    )
    engine = engine_of(box, "slc")
    box.fault("slc", "crash")
    shown(box, "slc", ActiveState="active", NRestarts=1)
    box.wait_ready("slc")
    box.fault("slc", "crash")
    props = shown(box, "slc", ActiveState="failed")
    assert props["Result"] == "exit-code" and props["ExecMainStatus"] == 1 and props["NRestarts"] == 2, props
    texts = journal_texts(box, "slc", f"{box.unit('slc')}: Start request repeated too quickly.")
    assert f"{box.unit('slc')}: Start request repeated too quickly." in texts, texts
    assert texts.count(f"{box.unit('slc')}: Failed with result 'exit-code'.") == 3, texts
    event = down_event(engine)
    assert event.cause == "start_limit_hit", event.message
    assert "start limit was hit after 2 restarts" in event.message, event.message
    assert "start request repeated too quickly" in event.message and "Result=exit-code, exit status 1" in event.message
    assert event.details["unit"]["start_limit_line"] == f"{box.unit('slc')}: Start request repeated too quickly."
    assert any(
        cmd.startswith(f"systemctl --user reset-failed {box.unit('slc')} && ") for _, cmd in fix_commands(engine)
    )


def _down_cause(engine, reason="HTTP 503"):
    """Evaluate a failed probe of ENGINE once more; its firing engine_down event, or None."""
    evaluate("engine_liveness", engine=engine, up=False, reason=reason, rechecked=True, unit_now=unit_now(engine))
    return AlertEvent.objects.filter(rule="engine_down", subject=engine.name, state="firing").first()


def test_a_readiness_helper_that_waits_holds_the_unit_activating_too_long(box, engine_of):
    """ExecStartPost= runs the readiness helper while the engine loads for ever: the unit sits in
    activating/start-post; past the rule's activating budget the alert says "activating too long".
    The time is counted from the unit's InactiveExitTimestamp, not from when the rule first saw it
    activating: a rule that first looks 3 s into a 2 s budget says so at once."""
    from datetime import UTC, datetime

    from sparkops.alerts.services import rule_update
    from sparkops.launch.starts import parse_timestamp

    box.add("act", restart="no", start=False, load_seconds=900)
    engine = engine_of(box, "act")
    box.helper("act", 900, service="TimeoutStartSec=1000\n")
    box.restart("act")
    props = shown(box, "act", ActiveState="activating", SubState="start-post")
    assert box.show("act")["ControlPID"] != "0" and props["MainPID"] not in (0, "0"), props  # the helper runs
    evaluate("engine_liveness", engine=engine, up=False, reason="HTTP 503", rechecked=False)
    event = _down_cause(engine)
    assert event is None  # starting: systemd is still bringing it up, within the (600 s) budget
    rule_update(key="engine_down", params={"activating_budget_s": 2})
    began = parse_timestamp(props["InactiveExitTimestamp"])
    assert began is not None and "." in props["InactiveExitTimestamp"], props  # --timestamp=us+utc
    assert wait_for(lambda: (datetime.now(UTC) - began).total_seconds() > 3, timeout=WAIT_S)
    from sparkops.alerts.lifecycle import newest

    event = _down_cause(engine)  # its first look past the budget: the cause at once, no waiting out 2 s more
    assert event is not None and newest(event)[0] == "activating_too_long", event and newest(event)
    message = newest(event)[1]
    assert int(message.split("activating for ")[1].split(" s")[0]) >= 3, message
    assert shown(box, "act", ActiveState="activating")["SubState"] == "start-post"


def test_a_helper_that_exits_0_on_timeout_leaves_an_active_unit_that_does_not_answer(box, engine_of):
    box.add("lie", restart="no", start=False, load_seconds=900)
    engine = engine_of(box, "lie")
    box.helper("lie", 1, extra="--exit-0-on-timeout")
    box.restart("lie")
    props = shown(box, "lie", ActiveState="active", SubState="running")
    assert props["Result"] == "success" and props["MainPID"] not in (0, "0"), props
    assert box.show("lie")["ControlPID"] == "0"  # the helper is done
    # its run, as systemd keeps it until the next start (the gate's unit-less lines are found by it)
    ran = re.search(
        r"start_time=\[(.+?)\] ; stop_time=\[(.+?)\] ; pid=(\d+) ; code=exited ; status=0 }", props_post(box, "lie")
    )
    assert ran and ran[3] != "0" and "n/a" not in (ran[1], ran[2]), props_post(box, "lie")
    event = down_event(engine)
    assert event.cause == "active_not_answering", event.message
    assert "readiness lied" in event.message


def props_post(box, name):
    """`systemctl --user show UNIT -p ExecStartPost`, whole (its format is checked against real systemd's)."""
    from django.conf import settings

    from sparkops.collectors.command import output

    return output([settings.SPARKOPS_SYSTEMCTL, "--user", "show", box.unit(name), "-p", "ExecStartPost"], timeout=10)


def test_timeout_start_sec_reached_fails_the_start_with_result_timeout(box, engine_of):
    box.add("tmo", restart="no", start=False, load_seconds=900)
    engine = engine_of(box, "tmo")
    box.helper("tmo", 900, service="TimeoutStartSec=2\n")
    box.restart("tmo")
    props = shown(box, "tmo", ActiveState="failed")
    assert props["Result"] == "timeout" and props["MainPID"] == 0 and box.show("tmo")["ControlPID"] == "0", props
    texts = journal_texts(box, "tmo", f"{box.unit('tmo')}: Failed with result 'timeout'.")
    assert f"{box.unit('tmo')}: start-post operation timed out. Terminating." in texts, texts
    assert f"{box.unit('tmo')}: Failed with result 'timeout'." in texts, texts
    event = down_event(engine)
    # The simulator's unit ran before the restart (real systemd's did not): a restart that failed
    # to start says so; a first start that failed is the unit's failure.
    expected = "no_return_after_restart" if box.kind == "sim" else "unit_failed"
    assert event.cause == expected and "Result=timeout" in event.message, event.message


STYLES = {
    "pretty": r"[A-Z][a-z]{2} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z]+",
    "utc": r"[A-Z][a-z]{2} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC",
    "us": r"[A-Z][a-z]{2} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} [A-Z]+",
    "us+utc": r"[A-Z][a-z]{2} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} UTC",
    "unix": r"@\d{10}",
}


def test_systemctl_show_timestamp_styles(box, settings):
    """`systemctl show --timestamp=STYLE` prints each style the same way in real systemd 252 and the
    simulator (the product reads us+utc: microseconds, so starts are not rounded to the second); an
    unknown style is refused with systemd's words, and a timestamp never set stays empty."""
    import re

    box.add("tss")

    def show(style):
        return subprocess.run(
            [
                *shlex.split(settings.SPARKOPS_SYSTEMCTL),
                "--user",
                "show",
                box.unit("tss"),
                "--no-pager",
                "-p",
                "ActiveEnterTimestamp,InactiveEnterTimestamp",
                f"--timestamp={style}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )

    for style, pattern in STYLES.items():
        done = show(style)
        assert done.returncode == 0, (style, done.stderr)
        props = unit_props(done.stdout)
        assert re.fullmatch(pattern, props["ActiveEnterTimestamp"]), (style, props)
        assert props["InactiveEnterTimestamp"] == "", (style, props)
    done = show("bogus")
    assert done.returncode == 1 and done.stderr.strip() == "Invalid value: bogus.", done
