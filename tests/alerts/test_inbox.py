"""Issue 30 §5: the demo's local channel. A signed webhook to SparkOps's own inbox, delivered by
the real outbox through uvicorn on loopback, shown on /alerts/inbox/; the receiver keeps only
what a channel pointing at it signed, once per idempotency key."""

import json

import pytest
from django.test import Client
from django.urls import reverse

from sparkops.alerts import outbox
from sparkops.alerts.inbox import DEMO_CHANNEL, KEEP, RECEIVE_PATH, demo_inbox_channel
from sparkops.alerts.models import Delivery, InboxMessage, NotificationChannel
from sparkops.alerts.services import channel_send_test, external_alert_fire, external_alert_resolve
from sparkops.alerts.transports.webhook import sign


def send_due():
    for pk in Delivery.objects.filter(status="pending").values_list("pk", flat=True):
        outbox.delivery_send(delivery_id=pk)


@pytest.mark.django_db(transaction=True)
def test_the_demo_channel_receives_each_alert_through_the_real_outbox(shared_web, fleet, viewer_client):
    NotificationChannel.objects.exclude(name=DEMO_CHANNEL).delete()  # only the demo's channel, as in the demo
    _web, base, _log = shared_web  # the product's web server, its receiver as the demo's channel posts to it
    channel, created = demo_inbox_channel(base_url=base)
    assert created and channel.secret and channel.config["url"] == base + RECEIVE_PATH
    external_alert_fire(
        rule="engine_down",
        severity="critical",
        engine=fleet["vllm"],
        subject="vllm-main",
        message="vllm-main is down",
    )
    external_alert_resolve(rule="engine_down", engine=fleet["vllm"], subject="vllm-main")
    send_due()
    send_due()  # the resolved one waits for the firing one to settle first
    assert list(Delivery.objects.values_list("status", flat=True)) == ["sent", "sent"]
    received = list(InboxMessage.objects.order_by("id"))
    assert [m.body["transition"] for m in received] == ["firing", "resolved"]
    assert all(m.channel == channel and m.idempotency_key for m in received)
    page = viewer_client.get(reverse("alerts:inbox")).content.decode()
    assert page.count('class="card inbox-msg') == 2 and "engine_down on vllm-main" in page
    assert "vllm-main is down" in page and DEMO_CHANNEL in page
    partial = viewer_client.get(reverse("alerts:inbox"), {"partial": 1}).content.decode()
    assert "<html" not in partial and f'id="inbox-{received[-1].pk}"' in partial


@pytest.mark.django_db
def test_up_again_keeps_the_channel_and_its_secret_and_follows_the_port():
    first, created = demo_inbox_channel(base_url="http://127.0.0.1:8000")
    again, created_again = demo_inbox_channel(base_url="http://127.0.0.1:8123")
    assert created and not created_again and again.pk == first.pk and again.secret == first.secret
    assert again.config["url"] == "http://127.0.0.1:8123" + RECEIVE_PATH


def _post(client, body, *, secret=None, signature=None, key="k-1"):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"HTTP_IDEMPOTENCY_KEY": key}
    if secret or signature:
        headers["HTTP_X_SPARKOPS_SIGNATURE"] = signature or sign(secret, raw)
    return client.post(RECEIVE_PATH, raw, content_type="application/json", **headers)


@pytest.mark.django_db
def test_the_receiver_keeps_only_signed_deliveries_once():
    channel, _ = demo_inbox_channel(base_url="http://127.0.0.1:8000")
    other = NotificationChannel.objects.create(
        name="elsewhere", kind="webhook", config={"url": "http://127.0.0.1:9/hook"}, secret="other-secret"
    )
    client = Client()  # no login: the signature is the credential
    body = {"transition": "test", "rule": "test", "subject": "x", "message": "hello"}
    assert _post(client, body).status_code == 403  # unsigned
    assert _post(client, body, signature="0" * 64).status_code == 403
    assert _post(client, body, secret=other.secret).status_code == 403  # signed for a channel that points elsewhere
    assert _post(client, b"not json", secret=channel.secret).status_code == 400
    assert _post(client, b"x" * 70_000, secret=channel.secret).status_code == 413
    assert client.post(RECEIVE_PATH, {"a": "form"}).status_code == 415  # a form post, even a logged-in one
    assert client.get(RECEIVE_PATH).status_code == 405
    assert not InboxMessage.objects.exists()
    first = _post(client, body, secret=channel.secret)
    assert first.status_code == 201
    retried = _post(client, body, secret=channel.secret)
    assert retried.status_code == 200 and retried.json() == {"id": first.json()["id"], "duplicate": True}
    assert InboxMessage.objects.count() == 1


@pytest.mark.django_db
def test_the_inbox_keeps_the_newest(monkeypatch):
    monkeypatch.setattr("sparkops.alerts.inbox.KEEP", 3)
    channel, _ = demo_inbox_channel(base_url="http://127.0.0.1:8000")
    client = Client()
    for n in range(5):
        assert _post(client, {"n": n}, secret=channel.secret, key=f"k-{n}").status_code == 201
    assert sorted(m.body["n"] for m in InboxMessage.objects.all()) == [2, 3, 4]
    assert KEEP == 500


@pytest.mark.django_db(transaction=True)
def test_a_channels_test_button_lands_in_the_inbox_page_lists_it(viewer_client, live_server):
    """The Test button of the channels page, sent by the outbox to Django's own live server."""
    channel, _ = demo_inbox_channel(base_url=live_server.url)
    delivery = channel_send_test(channel=channel)
    assert outbox.delivery_send(delivery_id=delivery.pk) == "sent"
    page = viewer_client.get(reverse("alerts:inbox")).content.decode()
    assert f"Test notification from SparkOps to channel {DEMO_CHANNEL}." in page


@pytest.mark.django_db
def test_an_empty_inbox_says_how_to_fill_it(viewer_client):
    page = viewer_client.get(reverse("alerts:inbox")).content.decode()
    assert 'id="inbox-empty"' in page and "sparkops up --demo" in page
