"""The admin's raw-JSON channel form says what the JSON holds and checks it by the Channels form's rules."""

import pytest
from django.urls import reverse

from sparkops.alerts.models import NotificationChannel

pytestmark = pytest.mark.django_db

ADD = "admin:alerts_notificationchannel_add"


def _post(client, kind, config):
    return client.post(
        reverse(ADD),
        {
            "name": "ops-hook",
            "kind": kind,
            "config": config,
            "secret": "",
            "enabled": "on",
            "health": "ok",
            "last_error": "",
            "routes-TOTAL_FORMS": 0,
            "routes-INITIAL_FORMS": 0,
        },
    )


def test_the_config_field_says_which_keys_each_kind_takes(admin_client_):
    page = admin_client_.get(reverse(ADD)).content.decode()
    hint = page.split('id="id_config_helptext"')[1].split("</div>")[0]
    assert 'webhook: {"url": ' in hint and 'email: {"address": ' in hint and 'apprise: {"url": ' in hint
    assert "Alerts → Channels" in hint


@pytest.mark.parametrize(
    "kind, config, message",
    [
        ("webhook", "{}", "A webhook channel needs an http:// or https:// URL. (key &quot;url&quot; of the JSON)"),
        ("webhook", '{"uri": "http://x"}', "A webhook channel needs an http:// or https:// URL."),
        ("webhook", '{"url": "http://127.0.0.1:9/h", "format": "slack"}', "format is &#x27;sparkops&#x27; or"),
        ("email", '{"url": "http://x"}', "An email channel needs a valid address."),
        ("webhook", "[1, 2]", "The config is a JSON object"),
    ],
)
def test_a_wrong_config_is_refused_at_the_field_and_saves_nothing(admin_client_, kind, config, message):
    response = _post(admin_client_, kind, config)
    assert response.status_code == 200
    page = response.content.decode()
    assert message in page, page[page.find("errorlist") - 200 : page.find("errorlist") + 400]
    assert "This field is required" not in page
    assert not NotificationChannel.objects.exists()


def test_a_right_config_saves(admin_client_):
    response = _post(admin_client_, "webhook", '{"url": "http://127.0.0.1:9/hook"}')
    assert response.status_code == 302
    assert NotificationChannel.objects.get().config == {"url": "http://127.0.0.1:9/hook"}
