"""Apprise channels (chat and push services by URL) in the outbox, against a real receiver on
127.0.0.1 through Apprise's own json:// notifier: delivered with the alert's words, retried
after the receiver fails (Apprise says only "failed": transient), an invalid URL refused when
the channel is saved (CLI, form, admin) and permanent should one be stored anyway."""

import io
import json

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from sparkops.alerts.models import Delivery, NotificationChannel
from sparkops.alerts.services import channel_create, channel_send_test, external_alert_resolve

from .test_outbox import fire, make_due, send_all

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat(fleet, receiver):
    NotificationChannel.objects.exclude(kind="apprise").update(enabled=False)  # only this channel hears it
    return channel_create(name="chat", kind="apprise", url=f"json://127.0.0.1:{receiver.port}/hook")


def bodies(receiver):
    return [json.loads(r["body"]) for r in receiver.requests]


def test_an_alert_reaches_the_receiver_through_apprise(fleet, chat, receiver):
    fire(fleet)
    send_all()
    delivery = Delivery.objects.get(channel=chat)
    assert delivery.status == "sent" and delivery.attempts == 1
    (body,) = bodies(receiver)
    assert body["title"] == "[SparkOps CRITICAL] engine_down on vllm-main"
    assert body["type"] == "failure" and "vllm-main is down" in body["message"]
    assert "Cause: exit0_no_restart" in body["message"] and "/alerts/" in body["message"]

    external_alert_resolve(rule="engine_down", engine=fleet["vllm"], subject="vllm-main")
    send_all()
    assert bodies(receiver)[-1]["type"] == "success" and "RESOLVED" in bodies(receiver)[-1]["title"]


def test_a_failing_receiver_is_retried_until_it_takes_it(fleet, chat, receiver, fast_retry):
    receiver.script = [500]
    fire(fleet)
    send_all()
    delivery = Delivery.objects.get(channel=chat)
    assert delivery.status == "pending" and delivery.attempts == 1  # transient: Apprise says only "failed"
    assert delivery.last_error.startswith("Apprise (json://127.0.0.1:") and "500" in delivery.last_error
    assert NotificationChannel.objects.get(pk=chat.pk).health == "ok"
    make_due()
    send_all()
    delivery.refresh_from_db()
    assert delivery.status == "sent" and delivery.attempts == 2
    assert [a.ok for a in delivery.attempt_log.all()] == [False, True]
    assert len(receiver.requests) == 2 and bodies(receiver)[0] == bodies(receiver)[1]


def test_a_receiver_that_is_gone_is_transient_too(fleet, chat, receiver):
    receiver.close()
    fire(fleet)
    send_all()
    delivery = Delivery.objects.get(channel=chat)
    assert delivery.status == "pending" and "not delivered" in delivery.last_error


def test_the_test_button_goes_through_apprise(chat, receiver):
    channel_send_test(channel=chat)
    send_all()
    (body,) = bodies(receiver)
    assert body["title"] == "[SparkOps TEST] test on chat" and body["type"] == "info"


@pytest.mark.parametrize("url", ["", "nope://x", "tgram://", "https://", "slack://only-one-part", "json://"])
def test_an_invalid_url_is_refused_when_saved(db, url):
    with pytest.raises(ValidationError, match="Apprise"):
        channel_create(name="bad", kind="apprise", url=url)
    with pytest.raises(CommandError, match="Apprise"):
        call_command("channel", "add", "bad", "--apprise", url)
    channel = NotificationChannel(name="bad", kind="apprise", config={"url": url})  # the admin's check
    with pytest.raises(ValidationError, match="Apprise"):
        channel.full_clean()
    assert not NotificationChannel.objects.exists()


def test_cli_adds_an_apprise_channel_and_lists_it_masked(db):
    out = io.StringIO()
    call_command("channel", "add", "phone", "--apprise", "ntfy://alice:hunter22@ntfy.example.org/sparkops", stdout=out)
    channel = NotificationChannel.objects.get(name="phone")
    assert channel.kind == "apprise" and channel.config == {"url": "ntfy://alice:hunter22@ntfy.example.org/sparkops"}
    listing = io.StringIO()
    call_command("channel", "list", stdout=listing)
    assert "phone" in listing.getvalue() and "apprise" in listing.getvalue()
    assert "hunter22" not in out.getvalue() + listing.getvalue()  # the secret part is masked
    with pytest.raises(CommandError, match="--secret applies to webhooks only"):
        call_command("channel", "add", "phone2", "--apprise", "ntfy://topic", "--secret", "x")


def test_an_invalid_url_stored_anyway_is_permanent(fleet, chat, receiver):
    NotificationChannel.objects.filter(pk=chat.pk).update(config={"url": "nope://x"})
    fire(fleet)
    send_all()
    delivery = Delivery.objects.get(channel=chat)
    chat.refresh_from_db()
    assert delivery.status == "failed" and delivery.attempt_log.get().permanent
    assert chat.health == "failing" and "Apprise does not read" in chat.last_error
    assert receiver.requests == []
