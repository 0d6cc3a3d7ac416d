"""An alert keeps the cause and message it fired with; its resolution says how it ended (issue 25, item 4).

The rule runs through evaluate() on readings in the `sparkops poll --json` contract format, the
notifications leave through the real outbox to the real loopback webhook receiver and SMTP server."""

import json
from datetime import timedelta

import pytest

from dashboard.clock import db_now
from sparkops.alerts import outbox
from sparkops.alerts.evaluate import evaluate
from sparkops.alerts.lifecycle import alerts_resolve_engine
from sparkops.alerts.models import AlertEvent, Delivery
from sparkops.alerts.notes import note_add
from sparkops.alerts.payloads import alertmanager_body
from tests.alerts.test_rules import EXIT0  # the unit of an engine that exited 0 under Restart=on-failure

pytestmark = pytest.mark.django_db

STARTING = {**EXIT0, "ActiveState": "activating", "SubState": "start", "MainPID": "4242"}
ACTIVE = {**EXIT0, "ActiveState": "active", "SubState": "running", "MainPID": "4242"}


def send_all():
    for pk in Delivery.objects.filter(status="pending").values_list("pk", flat=True):
        outbox.delivery_send(delivery_id=pk)


def unit_is(engine, unit):
    engine.latest = {"unit": unit}
    engine.save(update_fields=["latest"])


def fire_exit0(engine):
    unit_is(engine, EXIT0)
    evaluate("engine_liveness", engine=engine, up=False, reason="connection refused", rechecked=True)
    event = AlertEvent.objects.get(rule="engine_down", state="firing")
    assert event.cause == "exit0_no_restart"
    return event


def fired_ago(event, seconds):
    """The alert fired SECONDS ago (the resolution measures from its firing)."""
    AlertEvent.objects.filter(pk=event.pk).update(fired_at=db_now() - timedelta(seconds=seconds))


def test_resolved_alert_keeps_its_fired_cause_and_says_how_it_ended(fleet, channels, receiver, smtp):
    vllm = fleet["vllm"]
    event = fire_exit0(vllm)
    fired_message = event.message
    assert "exited with status 0 while the unit has Restart=on-failure" in fired_message
    # Someone starts it by hand: the probe still fails while the unit is activating.
    unit_is(vllm, STARTING)
    evaluate("engine_liveness", engine=vllm, up=False, reason="connection refused", rechecked=True)
    event.refresh_from_db()
    assert event.state == "firing" and event.cause == "exit0_no_restart" and event.message == fired_message
    assert event.details["latest"]["cause"] == "starting"  # the newest finding, beside the fired one
    # Up again, systemd restarted nothing (NRestarts unchanged).
    unit_is(vllm, ACTIVE)
    fired_ago(event, 117)
    evaluate("engine_liveness", engine=vllm, up=True, reason="")
    event.refresh_from_db()
    assert event.state == "resolved" and event.cause == "exit0_no_restart" and event.message == fired_message
    resolution = event.details["resolution"]
    assert resolution.startswith("up again after 1 min 57 s, started again outside SparkOps"), resolution
    assert "NRestarts 0, unchanged" in resolution
    send_all()
    assert receiver.wait_for(2)
    resolved = [json.loads(r["body"]) for r in receiver.requests if json.loads(r["body"])["transition"] == "resolved"]
    (body,) = resolved
    assert body["cause"] == "exit0_no_restart" and body["message"] == fired_message
    assert "is starting" not in body["message"]
    assert body["resolution"] == resolution and body["latest"] is None
    manager = alertmanager_body(body)
    assert manager["alerts"][0]["annotations"]["summary"] == fired_message
    assert manager["alerts"][0]["annotations"]["resolution"] == resolution
    mail = [m["data"].decode() for m in smtp.messages if "RESOLVED" in m["data"].decode()]
    assert mail and "Resolution: up again after 1 min 57 s" in mail[0] and "exited with status 0" in mail[0]
    assert event.notes.filter(kind="resolved", text__contains="up again after 1 min 57 s").exists()


def test_resolution_names_systemd_when_nrestarts_grew(fleet):
    vllm = fleet["vllm"]
    failed = {**EXIT0, "ActiveState": "failed", "Result": "exit-code", "ExecMainStatus": "1", "Restart": "always"}
    unit_is(vllm, failed)
    evaluate("engine_liveness", engine=vllm, up=False, reason="connection refused", rechecked=True)
    event = AlertEvent.objects.get(rule="engine_down", state="firing")
    assert event.cause == "unit_failed"
    unit_is(vllm, {**ACTIVE, "Restart": "always", "NRestarts": "1"})
    fired_ago(event, 5)
    evaluate("engine_liveness", engine=vllm, up=True, reason="")
    event.refresh_from_db()
    assert event.cause == "unit_failed"
    assert event.details["resolution"] == "up again after 5 s, restarted by systemd (NRestarts 0 → 1)"


def test_resolution_names_the_person_who_pressed_restart(fleet, operator):
    vllm = fleet["vllm"]
    event = fire_exit0(vllm)
    # What dashboard/unit_actions.py writes on the alert's timeline: the request, then the outcome.
    note_add(event, "unit_action", "Restart of vllm-main.service requested by op (through host.spark-1)", user=operator)
    note_add(event, "unit_action", "systemctl restart vllm-main.service on spark-1: done")
    unit_is(vllm, ACTIVE)
    evaluate("engine_liveness", engine=vllm, up=True, reason="")
    event.refresh_from_db()
    assert f"restarted by {operator.get_username()} (the Restart button)" in event.details["resolution"]
    assert event.cause == "exit0_no_restart"


def test_a_definitive_cause_learned_late_pages_again_and_keeps_the_fired_one(fleet, channels, receiver):
    vllm = fleet["vllm"]
    unit_is(vllm, {})
    evaluate("engine_liveness", engine=vllm, up=False, reason="connection refused", rechecked=True)
    event = AlertEvent.objects.get(rule="engine_down", state="firing")
    assert event.cause == "connection_refused"
    unit_is(vllm, EXIT0)
    evaluate("engine_liveness", engine=vllm, up=False, reason="connection refused", rechecked=True)
    event.refresh_from_db()
    assert event.cause == "connection_refused" and event.details["latest"]["cause"] == "exit0_no_restart"
    send_all()
    assert receiver.wait_for(2)
    bodies = [json.loads(r["body"]) for r in receiver.requests]
    (again,) = [b for b in bodies if b["transition"] == "renotify"]
    assert again["cause"] == "connection_refused" and again["latest"]["cause"] == "exit0_no_restart"
    assert "will not restart it" in again["latest"]["message"]


def test_retired_engine_resolution_says_so(fleet):
    vllm = fleet["vllm"]
    event = fire_exit0(vllm)
    fired_ago(event, 60)
    alerts_resolve_engine(engine=vllm, reason="retired")
    event.refresh_from_db()
    assert event.cause == "exit0_no_restart"
    assert event.details["resolution"] == "closed after 1 min, the engine was retired: nothing polls it any more"


def test_detail_page_shows_the_fired_message_and_how_it_ended(fleet, client, operator):
    vllm = fleet["vllm"]
    event = fire_exit0(vllm)
    unit_is(vllm, ACTIVE)
    evaluate("engine_liveness", engine=vllm, up=True, reason="")
    client.force_login(operator)
    page = client.get(f"/alerts/{event.pk}/").content.decode()
    assert "exited with status 0 while the unit has Restart=on-failure" in page
    assert "How it ended" in page and "up again after" in page
