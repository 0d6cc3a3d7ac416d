"""Alert pages and the ack/silence/test/edit POSTs, with roles."""

import pytest
from django.template.loader import render_to_string
from django.urls import reverse

from sparkops.alerts.models import AlertEvent, AlertRule, Delivery, Silence
from sparkops.alerts.selectors import firing_alerts
from sparkops.alerts.services import external_alert_fire

pytestmark = pytest.mark.django_db


@pytest.fixture
def firing(fleet):
    return external_alert_fire(
        rule="engine_down",
        severity="critical",
        engine=fleet["vllm"],
        subject="vllm-main",
        message="vllm-main exited with status 0",
        cause="exit0_no_restart",
    )


def test_viewer_cannot_ack_or_silence(viewer_client, firing):
    assert viewer_client.post(reverse("alerts:ack", args=[firing.pk])).status_code == 403
    assert viewer_client.post(reverse("alerts:silence", args=[firing.pk]), {"hours": 1}).status_code == 403
    firing.refresh_from_db()
    assert firing.acknowledged_at is None and not Silence.objects.exists()


def test_operator_acks(operator_client, operator, firing):
    response = operator_client.post(reverse("alerts:ack", args=[firing.pk]))
    assert response.status_code == 302
    firing.refresh_from_db()
    assert firing.acknowledged_by == operator and firing.notes.filter(kind="ack").exists()


def test_operator_silences_engine_and_rule(operator_client, firing, fleet):
    operator_client.post(reverse("alerts:silence", args=[firing.pk]), {"hours": 2, "reason": "rebuilding"})
    silence = Silence.objects.get()
    assert silence.engine == fleet["vllm"] and silence.rule == "engine_down"


def test_silence_rejects_bad_hours(operator_client, firing):
    operator_client.post(reverse("alerts:silence", args=[firing.pk]), {"hours": "-3"})
    assert not Silence.objects.exists()


def test_write_views_declare_roles():
    from sparkops.alerts import views

    assert views.ack.required_role == "operator" and views.silence.required_role == "operator"
    assert views.channel_test.required_role == "admin" and views.rule_edit.required_role == "admin"


def test_list_filters(viewer_client, firing, fleet):
    external_alert_fire(
        rule="kernel_fault", severity="warning", host=fleet["host"], subject="spark-1", message="Xid 13"
    )
    page = viewer_client.get(reverse("alerts:index"), {"rule": "kernel_fault"}).content.decode()
    assert "Xid 13" in page and "exited with status 0" not in page.split("<h2>History")[1]
    page = viewer_client.get(reverse("alerts:index"), {"engine": "vllm-main"}).content.decode()
    assert "Xid 13" not in page.split("<h2>History")[1]


def test_detail_shows_timeline_and_attempts(viewer_client, firing):
    page = viewer_client.get(reverse("alerts:detail", args=[firing.pk])).content.decode()
    assert "exit0_no_restart" in page and "firing" in page
    for d in Delivery.objects.filter(event=firing):
        assert d.idempotency_key in page


def test_firing_partial_buttons_only_for_operators(firing):
    html = render_to_string("alerts/_firing.html", {"firing": firing_alerts(), "can_operate": False})
    assert "vllm-main" in html and "Ack" not in html
    html = render_to_string("alerts/_firing.html", {"firing": firing_alerts(), "can_operate": True})
    assert reverse("alerts:ack", args=[firing.pk]) in html and reverse("alerts:silence", args=[firing.pk]) in html


def test_channel_test_admin_only(viewer_client, fleet):
    url = reverse("alerts:channel-test", args=[fleet["webhook"].pk])
    assert viewer_client.post(url).status_code == 403
    assert not Delivery.objects.exists()


def test_channel_test_queues_delivery(admin_client_, fleet):
    admin_client_.post(reverse("alerts:channel-test", args=[fleet["webhook"].pk]))
    assert Delivery.objects.get().transition == "test"
    assert "ops-hook" in admin_client_.get(reverse("alerts:channels")).content.decode()


def test_rule_edit(admin_client_):
    response = admin_client_.post(
        reverse("alerts:rule-edit", args=["restart_loop"]),
        {"enabled": "on", "severity": "critical", "p_count": 5, "p_window_s": 1800},
    )
    assert response.status_code == 302
    row = AlertRule.objects.get(key="restart_loop")
    assert row.params["count"] == 5 and row.severity == "critical"


def test_rule_edit_bad_input_changes_nothing(admin_client_):
    admin_client_.post(reverse("alerts:rule-edit", args=["restart_loop"]), {"p_count": "lots"})
    assert not AlertRule.objects.filter(key="restart_loop", params__count="lots").exists()


def test_ack_resolved_is_refused(operator_client, firing, fleet):
    AlertEvent.objects.filter(pk=firing.pk).update(state="resolved")
    operator_client.post(reverse("alerts:ack", args=[firing.pk]))
    firing.refresh_from_db()
    assert firing.acknowledged_at is None


def test_channels_page_queries_do_not_grow_with_channels(admin_client_, fleet, django_assert_max_num_queries):
    from sparkops.alerts.models import NotificationChannel
    from sparkops.alerts.services import channel_send_test

    for n in range(4):
        channel = NotificationChannel.objects.create(
            name=f"extra-{n}", kind="webhook", config={"url": "http://127.0.0.1:9/"}
        )
        for _ in range(7):
            channel_send_test(channel=channel)
    with django_assert_max_num_queries(8):
        page = admin_client_.get(reverse("alerts:channels")).content.decode()
    assert page.count("test: pending") == 4 * 5 and page.count("7 waiting") == 4
