"""The outbox against real receivers: content, HMAC, retries, permanent 4xx, email."""

import hashlib
import hmac
import json
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.models import Incident
from sparkops.alerts import outbox
from sparkops.alerts.lifecycle import renotify_due
from sparkops.alerts.models import AlertEvent, Delivery, NotificationChannel
from sparkops.alerts.services import alert_ack, external_alert_fire, external_alert_resolve, rule_update

pytestmark = pytest.mark.django_db


def fire(fleet, rule="engine_down", severity="critical", message="vllm-main is down"):
    return external_alert_fire(
        rule=rule,
        severity=severity,
        engine=fleet["vllm"],
        subject="vllm-main",
        message=message,
        cause="exit0_no_restart",
    )


def send_all(now=None):
    """What the worker does: send every due row once."""
    for pk in Delivery.objects.filter(status="pending").values_list("pk", flat=True):
        outbox.delivery_send(delivery_id=pk)


def make_due():
    Delivery.objects.filter(status="pending").update(next_attempt_at=timezone.now())


def test_webhook_content_and_hmac(fleet, channels, receiver):
    event = fire(fleet)
    send_all()
    assert receiver.wait_for(1)
    (request,) = receiver.requests
    body = json.loads(request["body"])
    assert body["rule"] == "engine_down" and body["severity"] == "critical" and body["subject"] == "vllm-main"
    assert body["cause"] == "exit0_no_restart" and body["message"] == "vllm-main is down"
    assert body["link"].endswith(f"/alerts/{event.pk}/") and body["started_at"] and body["resolved_at"] is None
    expected = hmac.new(b"s3cret", request["body"], hashlib.sha256).hexdigest()
    assert request["headers"]["X-SparkOps-Signature"] == expected
    assert request["headers"]["Idempotency-Key"] == Delivery.objects.get(channel=channels["webhook"]).idempotency_key


def test_email_has_text_and_html(fleet, channels, smtp):
    fire(fleet)
    send_all()
    assert Delivery.objects.get(channel=channels["email"]).status == "sent"
    (mail,) = smtp.messages
    raw = mail["data"].decode()
    assert mail["to"] == ["ops@example.test"]
    assert "[SparkOps CRITICAL] engine_down on vllm-main" in raw
    assert "text/plain" in raw and "text/html" in raw and "exit0_no_restart" in raw


def test_email_greylisted_retries_and_rejected_fails(fleet, channels, smtp, fast_retry):
    NotificationChannel.objects.filter(pk=channels["webhook"].pk).update(enabled=False)
    smtp.rcpt_replies = ["450 4.2.0 greylisted, try again later"]
    fire(fleet)
    send_all()
    mail = Delivery.objects.get(channel=channels["email"])
    assert mail.status == "pending" and "450" in mail.last_error and not smtp.messages
    make_due()
    send_all()
    assert Delivery.objects.get(pk=mail.pk).status == "sent" and len(smtp.messages) == 1
    smtp.rcpt_replies = ["550 5.1.1 no such user"]
    external_alert_resolve(rule="engine_down", engine=fleet["vllm"], subject="vllm-main")
    send_all()
    resolved = Delivery.objects.get(channel=channels["email"], transition="resolved")
    assert resolved.status == "failed" and resolved.attempt_log.get().permanent
    assert NotificationChannel.objects.get(pk=channels["email"].pk).health == "failing"


def test_retry_500_then_200(fleet, channels, receiver, fast_retry):
    receiver.script = [500, 503]
    fire(fleet)
    send_all()
    hook = Delivery.objects.get(channel=channels["webhook"])
    assert hook.status == "pending" and hook.attempts == 1 and "500" in hook.last_error
    # the retry is the first backoff (fast_retry's 0.2 s base) after the failed attempt: read from the
    # attempt's own time, not the wall clock (a loaded box passed those 0.2 s before `now()` was read)
    assert hook.next_attempt_at == hook.attempt_log.get().at + timedelta(seconds=0.2)
    make_due()
    send_all()
    make_due()
    send_all()
    hook.refresh_from_db()
    assert hook.status == "sent" and hook.attempts == 3
    assert [a.ok for a in hook.attempt_log.all()] == [False, False, True]
    assert len(receiver.accepted()) == 1 and len({r["headers"]["Idempotency-Key"] for r in receiver.requests}) == 1


def test_permanent_4xx_marks_channel_failing(fleet, channels, receiver):
    receiver.script = [404]
    fire(fleet)
    send_all()
    hook = Delivery.objects.get(channel=channels["webhook"])
    channel = NotificationChannel.objects.get(pk=channels["webhook"].pk)
    assert hook.status == "failed" and hook.attempt_log.get().permanent
    assert channel.health == "failing" and "404" in channel.last_error and channel.failing_since
    outbox.channel_mark_failing(channel=channel, error="HTTP 410", now=channel.failing_since + timedelta(hours=1))
    channel.refresh_from_db()
    assert channel.last_error == "HTTP 410" and channel.failing_since < timezone.now()  # the first failure is kept


def test_a_redirecting_webhook_is_a_permanent_failure_not_followed(fleet, channels, receiver):
    receiver.script = [302]
    fire(fleet)
    send_all()
    hook = Delivery.objects.get(channel=channels["webhook"])
    assert hook.status == "failed" and hook.attempt_log.get().permanent and "302 redirect" in hook.last_error
    assert len(receiver.requests) == 1  # asked once, not followed


def test_429_and_refused_are_transient(fleet, channels, receiver):
    receiver.script = [429]
    fire(fleet)
    send_all()
    assert Delivery.objects.get(channel=channels["webhook"]).status == "pending"
    receiver.close()
    make_due()
    send_all()
    hook = Delivery.objects.get(channel=channels["webhook"])
    assert hook.status == "pending" and "refused" in hook.last_error


def test_backoff_is_exponential_and_capped(settings):
    settings.SPARKOPS_ALERT_RETRY_BASE_S = 2
    settings.SPARKOPS_ALERT_RETRY_CAP_S = 600
    assert [outbox.backoff_s(n) for n in (1, 2, 3, 4)] == [2, 4, 8, 16]
    assert outbox.backoff_s(30) == 600


def test_transient_failures_give_up_only_after_retry_window(fleet, channels, receiver, settings):
    receiver.close()
    fire(fleet)
    Delivery.objects.update(created_at=timezone.now() - timedelta(hours=23))
    send_all()
    assert Delivery.objects.get(channel=channels["webhook"]).status == "pending"
    Delivery.objects.update(created_at=timezone.now() - timedelta(hours=27), next_attempt_at=timezone.now())
    send_all()
    assert Delivery.objects.get(channel=channels["webhook"]).status == "failed"


def test_claim_is_exclusive(fleet, channels):
    fire(fleet)
    pk = Delivery.objects.filter(channel=channels["webhook"]).get().pk
    assert outbox.claim(pk) is True
    assert outbox.claim(pk) is False


def test_sweep_requeues_lapsed_claims(fleet, channels):
    fire(fleet)
    pk = Delivery.objects.get(channel=channels["webhook"]).pk
    outbox.claim(pk)
    Delivery.objects.filter(pk=pk).update(claimed_until=timezone.now() - timedelta(seconds=1))
    assert pk in outbox.sweep()
    assert Delivery.objects.get(pk=pk).status == "pending"


def test_resolve_notifies_channels_that_heard_the_firing(fleet, channels, receiver, smtp):
    fire(fleet)
    send_all()
    event = external_alert_resolve(rule="engine_down", engine=fleet["vllm"], subject="vllm-main")
    assert event.state == "resolved"
    send_all()
    bodies = [b for _, b in receiver.accepted()]
    assert [b["transition"] for b in bodies] == ["firing", "resolved"]
    assert bodies[1]["resolved_at"] and len(smtp.messages) == 2


def test_critical_opens_incident_and_one_open_event(fleet, channels):
    first = fire(fleet)
    again = fire(fleet, message="still down")
    assert first.pk == again.pk and AlertEvent.objects.count() == 1
    assert Delivery.objects.count() == 2  # one per channel, not per observation
    incident = Incident.objects.get()
    assert incident.engine == fleet["vllm"] and "engine_down" in incident.trigger


def test_alertmanager_format(fleet, channels, receiver):
    hook = channels["webhook"]
    hook.config = {"url": receiver.url, "format": "alertmanager"}
    hook.save()
    fire(fleet)
    send_all()
    ((_, body),) = receiver.accepted()
    assert body["version"] == "4" and body["status"] == "firing"
    assert body["alerts"][0]["labels"]["alertname"] == "engine_down"
    assert body["alerts"][0]["annotations"]["summary"] == "vllm-main is down"


def test_renotify_unacknowledged_critical_at_its_interval(fleet, channels, operator):
    event = fire(fleet)
    external_alert_fire(
        rule="kernel_fault", severity="warning", host=fleet["host"], subject="spark-1", message="Xid 13"
    )
    rule_update(key="engine_down", renotify_s=600)
    start = timezone.now()
    assert renotify_due(now=start) == 0
    assert renotify_due(now=start + timedelta(seconds=601)) == 1  # the critical one only
    assert renotify_due(now=start + timedelta(seconds=602)) == 0  # its clock restarted
    assert renotify_due(now=start + timedelta(seconds=1202)) == 1
    keys = list(Delivery.objects.filter(transition="renotify").values_list("idempotency_key", flat=True))
    assert (
        len(keys) == 4 == len(set(keys))
        and Delivery.objects.filter(event__rule="kernel_fault", transition="renotify").count() == 0
    )
    alert_ack(event=event, user=operator)
    assert renotify_due(now=start + timedelta(hours=5)) == 0


def _lost_firing_then_resolved(fleet, channels):
    """A worker claimed the webhook's firing and was SIGKILLed mid-send (its claim lapsed
    without a word); then the alert resolved."""
    fire(fleet)
    firing = Delivery.objects.get(channel=channels["webhook"], transition="firing")
    assert outbox.claim(firing.pk)
    Delivery.objects.filter(pk=firing.pk).update(claimed_until=timezone.now() - timedelta(seconds=1))
    external_alert_resolve(rule="engine_down", engine=fleet["vllm"], subject="vllm-main")
    resolved = Delivery.objects.get(channel=channels["webhook"], transition="resolved")
    return firing, resolved


def test_a_resolve_waits_for_its_lost_firing_and_the_sweep_sends_them_in_order(fleet, channels, receiver):
    firing, resolved = _lost_firing_then_resolved(fleet, channels)
    # The resolve's own task runs first: it may not overtake the firing still "sending".
    assert outbox.delivery_send(delivery_id=resolved.pk) is None
    assert Delivery.objects.get(pk=resolved.pk).status == "pending" and not receiver.requests
    due = outbox.sweep()
    assert firing.pk in due and resolved.pk not in due
    for pk in [resolved.pk, *reversed(due)]:  # whatever order the worker's threads take them in
        outbox.delivery_send(delivery_id=pk)
    assert resolved.pk in outbox.sweep()  # the firing is settled now: the resolve is due
    assert outbox.delivery_send(delivery_id=resolved.pk) == "sent"
    assert [body["transition"] for _, body in receiver.accepted()] == ["firing", "resolved"]


def test_a_settled_firing_sends_the_waiting_resolve_at_once(
    fleet, channels, receiver, django_capture_on_commit_callbacks
):
    """Not a sweep later: the firing's settling queues the resolve (Celery eager here, so
    the queued task runs in this process)."""
    from sparkops.celery import app

    firing, resolved = _lost_firing_then_resolved(fleet, channels)
    Delivery.objects.filter(pk=firing.pk).update(status="pending", claimed_until=None)  # what the sweep does
    app.conf.task_always_eager = True
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert outbox.delivery_send(delivery_id=resolved.pk) is None
            assert outbox.delivery_send(delivery_id=firing.pk) == "sent"
    finally:
        app.conf.task_always_eager = False
    assert Delivery.objects.get(pk=resolved.pk).status == "sent"
    assert [body["transition"] for _, body in receiver.accepted()] == ["firing", "resolved"]


def test_a_firing_that_finally_failed_lets_its_resolve_go(fleet, channels, receiver):
    firing, resolved = _lost_firing_then_resolved(fleet, channels)
    Delivery.objects.filter(pk=firing.pk).update(status="failed", claimed_until=None)
    assert outbox.delivery_send(delivery_id=resolved.pk) == "sent"
    assert [body["transition"] for _, body in receiver.accepted()] == ["resolved"]
