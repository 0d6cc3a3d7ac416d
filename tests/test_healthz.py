from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from dashboard.models import Engine, Host
from sparkops.ports import free_port


def _fresh(fleet):
    Engine.objects.filter(pk=fleet["vllm"].pk).update(last_poll_at=timezone.now())
    Host.objects.filter(pk=fleet["host"].pk).update(last_report_at=timezone.now())


@pytest.mark.django_db
def test_healthy_when_database_redis_and_poll_are_fresh(client, fleet):
    _fresh(fleet)
    response = client.get("/healthz")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "ok" and body["database"] == "ok" and body["redis"] == "ok"


@pytest.mark.django_db
def test_unhealthy_without_any_poll(client, fleet):
    response = client.get("/healthz")
    assert response.status_code == 503
    assert "no poll has completed yet" in " ".join(response.json()["problems"])


@pytest.mark.django_db
def test_unhealthy_when_the_latest_poll_is_stale(client, fleet, settings):
    Engine.objects.filter(pk=fleet["vllm"].pk).update(last_poll_at=timezone.now() - timedelta(seconds=60))
    response = client.get("/healthz")
    assert response.status_code == 503
    assert "latest poll is" in " ".join(response.json()["problems"])


@pytest.mark.django_db
def test_unhealthy_when_a_host_worker_is_stale(client, fleet):
    _fresh(fleet)
    other = Host.objects.create(name="spark-2", last_report_at=timezone.now() - timedelta(seconds=30))
    response = client.get("/healthz")
    assert response.status_code == 503
    assert "host spark-2: its worker has not reported for 30 s" in response.json()["problems"]
    other.delete()
    assert client.get("/healthz").status_code == 200


@pytest.mark.django_db
def test_unhealthy_when_redis_is_unreachable(client, fleet):
    _fresh(fleet)
    with override_settings(CELERY_BROKER_URL=f"redis://127.0.0.1:{free_port()}/0"):
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["redis"] == "error"
