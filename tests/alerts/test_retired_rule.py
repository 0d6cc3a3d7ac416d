"""A rule key that no longer exists (unit_no_restart, retired for the launch audit's Restart
check) stays readable: its old alert rows, routes and settings rows break no page."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from sparkops.alerts.models import AlertEvent, AlertRule

pytestmark = pytest.mark.django_db


@pytest.fixture
def old_rows(fleet):
    now = timezone.now()
    AlertRule.objects.create(key="unit_no_restart", enabled=True)
    firing = AlertEvent.objects.create(
        rule="unit_no_restart",
        severity="info",
        state="firing",
        engine=fleet["vllm"],
        host=fleet["host"],
        subject="vllm-main.service",
        message="vllm-main.service has Restart=on-failure: an engine that dies with exit status 0 will not be restarted.",
        started_at=now - timedelta(hours=2),
        fired_at=now - timedelta(hours=2),
    )
    resolved = AlertEvent.objects.create(
        rule="unit_no_restart",
        severity="info",
        state="resolved",
        engine=fleet["vllm"],
        host=fleet["host"],
        subject="vllm-main.service",
        message="an older one",
        started_at=now - timedelta(days=3),
        fired_at=now - timedelta(days=3),
        resolved_at=now - timedelta(days=2),
    )
    return firing, resolved


def test_old_rows_of_a_retired_rule_render_on_every_alerts_page(old_rows, client, operator, admin_user):
    firing, resolved = old_rows
    client.force_login(operator)
    for url in (
        reverse("alerts:index"),
        reverse("alerts:index") + "?rule=unit_no_restart",
        reverse("alerts:index") + "?state=resolved",
        reverse("alerts:detail", args=[firing.pk]),
        reverse("alerts:detail", args=[resolved.pk]),
        reverse("engine-detail", args=["vllm-main"]),
        "/",
    ):
        response = client.get(url)
        assert response.status_code == 200, url
    assert "unit_no_restart" in client.get(reverse("alerts:detail", args=[firing.pk])).content.decode()
    listed = client.get(reverse("alerts:index") + "?rule=unit_no_restart").content.decode()
    assert "vllm-main.service has Restart=on-failure" in listed
    client.force_login(admin_user)
    rules = client.get(reverse("alerts:rules"))
    assert rules.status_code == 200 and 'id="rule-unit_no_restart"' not in rules.content.decode()
    assert client.get(reverse("alerts:channels")).status_code == 200


def test_acknowledging_an_old_alert_of_a_retired_rule_works(old_rows, client, operator):
    firing, _ = old_rows
    client.force_login(operator)
    response = client.post(reverse("alerts:ack", args=[firing.pk]), follow=True)
    assert response.status_code == 200
    firing.refresh_from_db()
    assert firing.acknowledged_by == operator


def test_the_retired_rules_settings_page_is_not_found_not_an_error(old_rows, client, admin_user):
    client.force_login(admin_user)
    assert client.post(reverse("alerts:rule-edit", args=["unit_no_restart"]), {"enabled": "on"}).status_code == 404
    assert AlertRule.objects.get(key="unit_no_restart").enabled  # the old row is left as it was
