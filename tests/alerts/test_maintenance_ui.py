"""The silences & maintenance page and channel routing, through the forms, with roles; the
suppression and routing effects are checked on the lifecycle's own outbox rows."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from sparkops.alerts.models import Delivery, MaintenanceWindow, Route, Silence
from sparkops.alerts.services import external_alert_fire, silence_create

pytestmark = pytest.mark.django_db


def local(dt):
    """What a datetime-local input sends."""
    return timezone.localtime(dt).strftime("%Y-%m-%dT%H:%M")


def window_data(fleet, *, scope=None, start=None, end=None, reason="driver upgrade"):
    scope = scope or f"host:{fleet['host'].pk}"
    end = end if end is not None else timezone.now() + timedelta(hours=1)
    return {"scope": scope, "starts_at": local(start) if start else "", "ends_at": local(end), "reason": reason}


def fire_engine_down(fleet):
    return external_alert_fire(
        rule="engine_down",
        severity="critical",
        engine=fleet["vllm"],
        subject="vllm-main",
        message="vllm-main exited with status 0",
        cause="exit0_no_restart",
    )


def fire_kernel_fault(fleet):
    return external_alert_fire(
        rule="kernel_fault", severity="warning", host=fleet["host"], subject="spark-1", message="Xid 13"
    )


def channels_notified(event):
    return set(Delivery.objects.filter(event=event).values_list("channel__name", flat=True))


@pytest.mark.parametrize(
    "change, error",
    [
        ({"end": "past"}, "The end is in the past"),
        ({"start": 2, "end": 1}, "The end must be after the start"),
        ({"start": -3}, "The start is in the past"),
        ({"end": 24 * 100}, "at most 90 days"),
        ({"reason": ""}, "This field is required"),
        ({"scope": "engine:999999"}, "Select a valid choice"),
    ],
)
def test_bad_window_rerenders_with_the_error_and_saves_nothing(operator_client, fleet, change, error):
    now = timezone.now()
    start = now + timedelta(hours=change["start"]) if "start" in change else None
    end = now - timedelta(hours=1) if change.get("end") == "past" else now + timedelta(hours=change.get("end", 1))
    data = window_data(fleet, start=start, end=end, scope=change.get("scope"), reason=change.get("reason", "upgrade"))
    response = operator_client.post(reverse("alerts:maintenance-new"), data)
    assert response.status_code == 400
    page = response.content.decode()
    assert error in page and 'id="maintenance-form"' in page
    assert f'value="{data["reason"]}"' in page or not data["reason"]  # what was typed is kept
    assert not MaintenanceWindow.objects.exists()


def test_write_views_declare_roles():
    from sparkops.alerts import views

    assert views.maintenance_new.required_role == views.maintenance_end.required_role == "operator"
    assert views.silence_end.required_role == "operator" and views.channel_routes.required_role == "admin"


def test_viewer_gets_403_on_every_write_and_nothing_changes(viewer_client, fleet, operator):
    silence = silence_create(engine=fleet["vllm"], hours=1, user=operator)
    window = MaintenanceWindow.objects.create(starts_at=timezone.now(), ends_at=timezone.now() + timedelta(hours=1))
    posts = [
        (reverse("alerts:maintenance-new"), window_data(fleet)),
        (reverse("alerts:maintenance-end", args=[window.pk]), {}),
        (reverse("alerts:silence-end", args=[silence.pk]), {}),
        (reverse("alerts:channel-routes", args=[fleet["webhook"].pk]), {}),
    ]
    for url, data in posts:
        assert viewer_client.post(url, data).status_code == 403, url
    assert MaintenanceWindow.objects.get().ends_at == window.ends_at and MaintenanceWindow.objects.count() == 1
    assert Silence.objects.get().until == silence.until
    page = viewer_client.get(reverse("alerts:silences")).content.decode()
    assert "vllm-main" in page and 'id="maintenance-form"' not in page and "End now" not in page


def test_operator_cannot_edit_routes(operator_client, fleet):
    url = reverse("alerts:channel-routes", args=[fleet["webhook"].pk])
    assert operator_client.post(url, routes_data(fleet["webhook"], [("engine_down", "critical")])).status_code == 403
    assert not Route.objects.exists()


def test_window_set_through_the_form_suppresses_and_ending_it_lets_the_next_alert_notify(
    operator_client, operator, fleet
):
    response = operator_client.post(reverse("alerts:maintenance-new"), window_data(fleet))
    assert response.status_code == 302
    window = MaintenanceWindow.objects.get()
    assert window.host == fleet["host"] and window.engine is None and window.created_by == operator

    page = operator_client.get(reverse("alerts:silences")).content.decode()
    row = page.split(f'id="maintenance-{window.pk}"')[1].split("</tr>")[0]
    assert all(text in row for text in ("<strong>active</strong>", "host spark-1", "driver upgrade", "otto", "End now"))
    suppressed = fire_engine_down(fleet)  # the engine is on the host under maintenance
    assert not Delivery.objects.exists() and suppressed.notes.filter(kind="suppressed").exists()

    operator_client.post(reverse("alerts:maintenance-end", args=[window.pk]))
    window.refresh_from_db()
    assert window.ends_at <= timezone.now() and "ended early by otto" in window.reason
    assert "driver upgrade" not in operator_client.get(reverse("alerts:silences")).content.decode()
    assert channels_notified(fire_kernel_fault(fleet)) == {"ops-mail", "ops-hook"}


def test_upcoming_window_is_listed_and_cancelled(operator_client, fleet):
    start = timezone.now() + timedelta(hours=2)
    operator_client.post(
        reverse("alerts:maintenance-new"), window_data(fleet, scope="all", start=start, end=start + timedelta(hours=1))
    )
    window = MaintenanceWindow.objects.get()
    page = operator_client.get(reverse("alerts:silences")).content.decode()
    row = page.split(f'id="maintenance-{window.pk}"')[1].split("</tr>")[0]
    assert all(text in row for text in ("<td>upcoming</td>", "everything", "Cancel"))
    assert channels_notified(fire_engine_down(fleet)) == {"ops-mail", "ops-hook"}  # not started yet
    operator_client.post(reverse("alerts:maintenance-end", args=[window.pk]))
    assert not MaintenanceWindow.objects.exists()


def test_silence_listed_and_ended_early(operator_client, operator, fleet):
    silence_create(engine=fleet["vllm"], rule="engine_down", hours=3, user=operator, reason="rebuilding")
    page = operator_client.get(reverse("alerts:silences")).content.decode()
    assert "rebuilding" in page and "engine vllm-main" in page and "engine_down" in page
    operator_client.post(reverse("alerts:silence-end", args=[Silence.objects.get().pk]))
    assert "rebuilding" not in operator_client.get(reverse("alerts:silences")).content.decode()
    assert channels_notified(fire_engine_down(fleet)) == {"ops-mail", "ops-hook"}


def test_alert_list_links_to_the_page(viewer_client):
    assert reverse("alerts:silences") in viewer_client.get(reverse("alerts:index")).content.decode()


def routes_data(channel, rows, *, initial=0, delete=()):
    prefix = f"routes-{channel.pk}"
    data = {
        f"{prefix}-TOTAL_FORMS": len(rows),
        f"{prefix}-INITIAL_FORMS": initial,
        f"{prefix}-MIN_NUM_FORMS": 0,
        f"{prefix}-MAX_NUM_FORMS": 1000,
    }
    for i, (rule, severity) in enumerate(rows):
        data[f"{prefix}-{i}-rule"], data[f"{prefix}-{i}-min_severity"] = rule, severity
        if i in delete:
            data[f"{prefix}-{i}-DELETE"] = "on"
    return data


def test_route_set_through_the_form_limits_what_a_channel_receives(admin_client_, fleet):
    hook = fleet["webhook"]
    page = admin_client_.get(reverse("alerts:channels")).content.decode()
    assert page.count(">everything") >= 2 and f'id="routes-form-{hook.pk}"' in page
    response = admin_client_.post(
        reverse("alerts:channel-routes", args=[hook.pk]), routes_data(hook, [("engine_down", "critical")])
    )
    assert response.status_code == 302
    assert list(hook.routes.values_list("rule", "min_severity")) == [("engine_down", "critical")]
    page = admin_client_.get(reverse("alerts:channels")).content.decode()
    assert "engine_down ≥ critical" in page

    assert channels_notified(fire_kernel_fault(fleet)) == {"ops-mail"}
    assert channels_notified(fire_engine_down(fleet)) == {"ops-mail", "ops-hook"}


def test_removing_every_route_means_everything_again(admin_client_, fleet):
    hook = fleet["webhook"]
    Route.objects.create(channel=hook, rule="engine_down", min_severity="critical")
    admin_client_.post(
        reverse("alerts:channel-routes", args=[hook.pk]),
        routes_data(hook, [("engine_down", "critical"), ("", "info")], initial=1, delete=(0,)),
    )
    assert not hook.routes.exists()
    assert channels_notified(fire_kernel_fault(fleet)) == {"ops-mail", "ops-hook"}


def test_duplicate_routes_rerender_and_change_nothing(admin_client_, fleet):
    hook = fleet["webhook"]
    Route.objects.create(channel=hook, rule="kernel_fault", min_severity="warning")
    response = admin_client_.post(
        reverse("alerts:channel-routes", args=[hook.pk]),
        routes_data(hook, [("kernel_fault", "warning"), ("kernel_fault", "critical")], initial=1),
    )
    assert response.status_code == 400 and "appears twice" in response.content.decode()
    assert list(hook.routes.values_list("rule", "min_severity")) == [("kernel_fault", "warning")]
    response = admin_client_.post(
        reverse("alerts:channel-routes", args=[hook.pk]), routes_data(hook, [("no_such_rule", "warning")])
    )
    assert response.status_code == 400 and "Select a valid choice" in response.content.decode()
    assert hook.routes.count() == 1
