"""A down card's fix: the unit's commands, and the admin's Restart through the box's own worker."""

import html
import json
import re
import subprocess
import sys

import pytest
from django.urls import reverse

from dashboard.models import Host
from dashboard.unit_actions import DROPIN_TEXT, fix_commands, unit_restart
from sparkops.alerts.models import AlertNote
from sparkops.alerts.services import external_alert_fire
from sparkops.changelog.models import Entry
from sparkops.live.cards import engine_card_html
from tests.boxes import worker_reported

pytestmark = pytest.mark.django_db


@pytest.fixture
def down(fleet):
    event = external_alert_fire(
        rule="engine_down",
        severity="critical",
        engine=fleet["llama"],
        subject="llama-side",
        message="llama-side exited with status 0",
        cause="exit0_no_restart",
    )
    return fleet["llama"], event


def _allow(fleet):
    Host.objects.filter(pk=fleet["host"].pk).update(unit_actions=True)


def test_commands_name_this_engines_unit(fleet):
    commands = [c for _, c in fix_commands(fleet["llama"])]
    assert commands[0] == "sudo systemctl restart llama-side.service"
    assert commands[1] == "sudo systemctl reset-failed llama-side.service && sudo systemctl start llama-side.service"
    assert "/etc/systemd/system/llama-side.service.d/50-sparkops-restart_always_bounded.conf" in commands[2]
    assert "daemon-reload" in commands[2]
    # The drop-in command, run by a shell, writes exactly the drop-in.
    printf = commands[2].split(" | ")[0].split(" && ")[1]
    assert subprocess.run(["sh", "-c", printf], capture_output=True, text=True, check=True).stdout == DROPIN_TEXT
    assert "Restart=always" in DROPIN_TEXT
    user_unit = fleet["vllm"]
    user_unit.unit_scope = "user"
    commands = [c for _, c in fix_commands(user_unit)]
    assert commands[0] == "systemctl --user restart vllm-main.service" and "sudo" not in " ".join(commands)
    folder = '"${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user/vllm-main.service.d"'
    assert f"{folder}/50-sparkops-restart_always_bounded.conf" in commands[2]


def test_a_down_card_shows_the_commands_and_restart_only_where_the_box_allows_it(down, fleet):
    engine, _ = down
    html = engine_card_html(engine)
    assert "sudo systemctl restart llama-side.service" in html and "data-copy" in html
    assert "unit-restart" not in html  # the box's worker did not say SPARKOPS_UNIT_ACTIONS=1
    _allow(fleet)
    engine.refresh_from_db()
    assert "unit-restart" in engine_card_html(engine)
    assert "sudo systemctl" not in engine_card_html(fleet["vllm"])  # an up card has no fix


def _settings(text):
    """{directive: value} of the restart drop-in's four settings, wherever TEXT says them."""
    return dict(re.findall(r"\b(StartLimitIntervalSec|StartLimitBurst|Restart|RestartSec)=(\w+)", text))


def test_the_cards_drop_in_is_the_audits_fix(down):
    """One fix, one text (issue 25, item 6): the down card's drop-in writes what the audit's fix says."""
    from types import SimpleNamespace

    from sparkops.audit.checks import CHECKS, RESTART_DROPIN

    engine, _ = down
    card = html.unescape(engine_card_html(engine))
    command = next(
        line for line in card.splitlines() if "50-sparkops-restart_always_bounded.conf" in line and "printf" in line
    )
    printf = re.search(r"printf '[^']*'", command).group(0)
    written = subprocess.run(["sh", "-c", printf], capture_output=True, text=True, check=True).stdout
    check = CHECKS["restart_always_bounded"]
    data = {"unit": {"unit": engine.unit, "restart": "on-failure", "start_limit_burst": 5}}
    (result,) = check.run([(SimpleNamespace(name=engine.name, kind=engine.kind), data)], settings=check.DEFAULTS)
    assert result.status == "fail" and _settings(written) == _settings(result.fix)
    assert _settings(written) == _settings(RESTART_DROPIN.text) and RESTART_DROPIN.name in result.fix
    assert set(_settings(written)) == {"StartLimitIntervalSec", "StartLimitBurst", "Restart", "RestartSec"}
    assert written == DROPIN_TEXT == RESTART_DROPIN.text


@pytest.mark.parametrize("who", ["viewer_client", "operator_client"])
def test_only_admins_restart(request, down, fleet, who):
    _allow(fleet)
    client = request.getfixturevalue(who)
    response = client.post(reverse("engine-restart", args=["llama-side"]), {"confirm": "llama-side.service"})
    assert response.status_code == 403
    assert not Entry.objects.exists() and not AlertNote.objects.filter(kind="unit_action").exists()


def test_restart_needs_confirmation_and_the_boxs_permission(admin_client_, down, fleet):
    url = reverse("engine-restart", args=["llama-side"])
    page = admin_client_.post(url, {"confirm": "llama-side.service"}, follow=True).content.decode()
    assert "Unit actions are off on spark-1" in page and "SPARKOPS_UNIT_ACTIONS=1" in page
    _allow(fleet)
    page = admin_client_.post(url, {"confirm": ""}, follow=True).content.decode()
    assert "confirm the restart of llama-side.service first" in page
    assert not Entry.objects.exists() and not AlertNote.objects.filter(kind="unit_action").exists()


def test_an_admins_restart_is_queued_on_the_box_and_written_down(
    admin_client_, admin_user, down, fleet, django_capture_on_commit_callbacks, monkeypatch
):
    engine, event = down
    _allow(fleet)
    worker_reported(fleet["host"])
    sent = []
    monkeypatch.setattr(unit_restart, "apply_async", lambda **kw: sent.append(kw))
    with django_capture_on_commit_callbacks(execute=True):
        admin_client_.post(reverse("engine-restart", args=["llama-side"]), {"confirm": "llama-side.service"})
    assert sent == [{"args": [engine.pk, event.pk, admin_user.pk], "queue": "host.spark-1"}]
    note = AlertNote.objects.get(event=event, kind="unit_action")
    assert note.user == admin_user and "requested by ada" in note.text
    entry = Entry.objects.get()
    assert entry.kind == "incident_note" and list(entry.engines.all()) == [engine] and "requested by ada" in entry.title


def test_the_worker_refuses_without_unit_actions(down, settings, admin_user):
    engine, event = down
    settings.SPARKOPS_UNIT_ACTIONS = False
    unit_restart(engine.pk, event.pk, admin_user.pk)
    assert "SPARKOPS_UNIT_ACTIONS is not set" in AlertNote.objects.get(event=event, kind="unit_action").text


def test_the_worker_resets_and_restarts_the_unit(down, settings, admin_user, tmp_path):
    engine, event = down
    log = tmp_path / "calls"
    script = tmp_path / "systemctl"
    script.write_text(
        f"#!{sys.executable}\nimport json, sys\nopen({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "sys.exit(1 if sys.argv[1] == 'restart' and 'fail' in sys.argv[2] else 0)\n"
    )
    script.chmod(0o755)
    settings.SPARKOPS_UNIT_ACTIONS, settings.SPARKOPS_SYSTEMCTL = True, str(script)
    unit_restart(engine.pk, event.pk, admin_user.pk)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls == [["reset-failed", "llama-side.service"], ["restart", "llama-side.service"]]
    notes = [n.text for n in AlertNote.objects.filter(event=event, kind="unit_action")]
    assert notes == ["systemctl restart llama-side.service on spark-1: done"]
    assert Entry.objects.get().title == notes[0]
    engine.unit = "fail.service"
    engine.save()
    unit_restart(engine.pk, event.pk, admin_user.pk)
    assert "failed: exit status 1" in AlertNote.objects.filter(kind="unit_action").last().text
