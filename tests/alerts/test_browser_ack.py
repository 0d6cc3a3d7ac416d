"""Real headless Chromium: an operator opens a firing alert's page and acknowledges it.
Reuses the live-view tests' browser fixture and logged-in Session against pytest-django's live_server."""

import pytest

from dashboard.models import Engine, Host
from sparkops.alerts.models import AlertEvent
from sparkops.alerts.services import external_alert_fire
from tests.live.test_browser import Session, browser  # noqa: F401  (browser is a fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _sync_db_beside_playwright(monkeypatch):
    # Playwright's sync API runs an event loop in this thread; the ORM calls here are still synchronous.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture
def firing(db):
    # No channels: the page and the ack are under test, not delivery.
    host = Host.objects.create(name="spark-1")
    engine = Engine.objects.create(
        name="vllm-main", kind="vllm", url="http://127.0.0.1:18001", host=host, unit="vllm-main.service", status="down"
    )
    return external_alert_fire(
        rule="engine_down",
        severity="critical",
        engine=engine,
        subject="vllm-main",
        message="vllm-main exited with status 0",
        cause="exit0_no_restart",
    )


def test_operator_acknowledges_from_the_alert_page(live_server, browser, operator, firing):
    page = Session(browser, live_server.url, operator).page
    page.goto(f"{live_server.url}/alerts/{firing.pk}/")
    assert "exited with status 0" in page.inner_text(".alert-message")
    page.click(f"#alert-{firing.pk} button:has-text('Ack')")
    page.wait_for_selector("text=Acknowledged engine_down on vllm-main.")
    assert page.url == f"{live_server.url}/alerts/{firing.pk}/"
    assert "by otto" in page.inner_text("dl")
    assert page.locator(f"#alert-{firing.pk} button:has-text('Ack')").count() == 0
    event = AlertEvent.objects.get(pk=firing.pk)
    assert event.acknowledged_by == operator and event.notes.filter(kind="ack").exists()
