"""A browser opens the simulated box's audit page (served by a real web server, observed by the
real resident poller) and sees a failing check with its fix."""

import pytest

from tests.live.test_browser import Session, browser, stack, wait_for_js  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


def test_the_box_audit_page_shows_a_failing_check_with_its_fix(stack, browser, viewer):  # noqa: F811
    from dashboard.models import ConfigSnapshot

    llama = stack.engines["sim-llama"]
    wait = __import__("time").monotonic() + 20
    while not ConfigSnapshot.objects.filter(engine=llama).exists():  # the poller's first observation
        assert __import__("time").monotonic() < wait, "no snapshot observed"
        __import__("time").sleep(0.2)
    s = Session(browser, stack.base, viewer)
    page = s.page
    page.goto(f"{stack.base}/hosts/{stack.host.name}/audit/")
    row = page.locator("tr[data-check=after_enabled_units].audit-fail")
    row.first.wait_for(timeout=10000)
    text = row.first.inner_text()
    assert "demo-vision.service: loaded/disabled" in text and "systemctl enable" in text
    page.goto(f"{stack.base}/engines/{llama.name}/")
    page.click("text=launch audit")  # the engine page links its audit
    page.wait_for_url(f"{stack.base}/engines/{llama.name}/audit/")
    page.locator("tr.audit-fail").first.wait_for(timeout=10000)
    # A restart is measured; the engine page shows its restart-budget table.
    import httpx

    from dashboard.models import EngineStart

    control = _control(stack)
    httpx.post(f"{control}/_sim/units/{llama.name}/restart", timeout=10).raise_for_status()
    wait = __import__("time").monotonic() + 30
    while not EngineStart.objects.filter(engine=llama).exists():
        assert __import__("time").monotonic() < wait, "no start measured"
        __import__("time").sleep(0.2)
    page.goto(f"{stack.base}/engines/{llama.name}/")
    page.locator("#restart-budget tr[data-kind=warm]").wait_for(timeout=10000)
    s.shot("audit-engine")
    assert not s.errors, s.errors


def _control(stack):
    """The simulator's control URL (its ports file names it with every engine)."""
    import json

    ports = stack.log.parent / "engines.json"
    return json.loads(ports.read_text().splitlines()[0])["control"]
