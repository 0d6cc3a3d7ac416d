"""Pages must render for a fleet that has not been polled yet (a fresh install's first seconds)."""

import pytest
from django.urls import reverse

from dashboard.models import Engine, Host


@pytest.mark.django_db
def test_every_page_renders_before_the_first_poll(viewer_client):
    host = Host.objects.create(name="fresh-box")
    Engine.objects.create(name="fresh-vllm", kind="vllm", url="http://127.0.0.1:9", host=host)
    for url in (
        reverse("overview"),
        reverse("engine-list"),
        reverse("engine-detail", args=["fresh-vllm"]),
        reverse("host-detail", args=["fresh-box"]),
        reverse("coresidency"),
        reverse("alerts:index"),
        reverse("changelog:index"),
        reverse("changelog:ledgers"),
        reverse("bench:index"),
    ):
        response = viewer_client.get(url)
        assert response.status_code == 200, f"{url} answered {response.status_code}"
