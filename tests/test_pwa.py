"""A web app manifest and icon, so SparkOps can sit on a phone's home screen."""

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_the_manifest_is_served_without_a_login_and_names_real_icons():
    response = Client().get(reverse("web-manifest"))
    assert response.status_code == 200 and response["Content-Type"] == "application/manifest+json"
    body = response.json()
    assert body["name"] == "SparkOps" and body["display"] == "standalone" and body["start_url"] == "/"
    sizes = {i["sizes"] for i in body["icons"]}
    assert {"192x192", "512x512"} <= sizes
    for icon in body["icons"]:
        assert finders.find(icon["src"].removeprefix("/static/")), icon


def test_every_page_links_the_manifest_and_the_icons(viewer_client):
    page = viewer_client.get(reverse("overview")).content.decode()
    assert f'rel="manifest" href="{reverse("web-manifest")}"' in page
    assert 'rel="apple-touch-icon"' in page and "icons/sparkops.svg" in page
    login = Client().get(reverse("login")).content.decode()
    assert 'rel="manifest"' in login
