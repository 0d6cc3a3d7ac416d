"""The rules page with a custom rule and its add form open, in real headless Chromium on a phone
(390×844): no sideways scroll, no word broken in a cell, every control at least 24×24 px (the
checks of tests/test_rough_edges_phone.py, on a page its world has no custom rule for). Screenshots
for the docs: artifacts/screenshots/custom-rules-{phone,desk}.png."""

import pytest

from tests.chromium import skip_without_chromium
from tests.test_rough_edges_phone import DESK, MEASURE, PHONE, SHOTS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
skip_without_chromium()


def test_the_rules_page_with_a_custom_rule_fits_a_phone(chromium, shared_web, admin_user):
    from dashboard.models import Engine, Host
    from sparkops.alerts.custom_services import custom_rule_create
    from sparkops.alerts.models import NotificationChannel, Route
    from tests.live.test_browser import Session

    host = Host.objects.create(name="spark")
    Engine.objects.create(name="vllm-main", kind="vllm", url="http://127.0.0.1:9", host=host)
    chat = NotificationChannel.objects.create(name="chat", kind="webhook", config={"url": "http://127.0.0.1:9/x"})
    Route.objects.create(channel=chat, rule="engine_down")
    custom_rule_create(
        data={
            "name": "kv-high",
            "engine": "vllm-main",
            "metric": "kv_cache_usage",
            "comparator": ">",
            "threshold": 0.95,
            "for": "5m",
            "channels": ["chat"],
        }
    )
    _proc, base, _log = shared_web
    session = Session(chromium, base, admin_user, viewport=PHONE)
    page = session.page
    page.goto(base + "/alerts/rules/")
    page.wait_for_load_state("load")
    assert "kv_cache_usage of vllm-main > 0.95 for 300 s" in page.inner_text("#custom-rules")
    page.click("#custom-rules summary")  # the add form, open
    faults = page.evaluate(MEASURE, True)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#custom-rules").screenshot(path=str(SHOTS / "custom-rules-phone.png"))
    session.context.close()
    desk = Session(chromium, base, admin_user, viewport=DESK)
    desk.page.goto(base + "/alerts/rules/")
    desk.page.click("#custom-rules summary")
    desk.page.locator("#custom-rules").screenshot(path=str(SHOTS / "custom-rules-desk.png"))
    desk.context.close()
    assert faults == []
