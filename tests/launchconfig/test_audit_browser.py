"""A browser opens the simulated box's audit page (served by a real web server, observed by the
real resident poller) and sees a failing check with its fix."""

import pytest

from tests.live.test_browser import Session, browser, stack, wait_for_js  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


def test_the_box_audit_page_shows_a_failing_check_with_its_fix(stack, browser, viewer):
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
    wait = __import__("time").monotonic() + 60
    # A start that served and was measured (a start made before the worker ran is kept, unmeasured).
    while not EngineStart.objects.filter(engine=llama, measured=True, healthy_at__isnull=False).exists():
        assert __import__("time").monotonic() < wait, "no start measured"
        __import__("time").sleep(0.2)
    page.goto(f"{stack.base}/engines/{llama.name}/")
    page.locator("#restart-budget tr[data-kind=warm]").wait_for(timeout=10000)
    s.shot("audit-engine")
    assert not s.errors, s.errors


def _control(stack):
    """The simulator's control URL (its ports file names it with every engine)."""
    import json

    ports = stack.ports
    return json.loads(ports.read_text().splitlines()[0])["control"]


def test_an_admin_sets_a_threshold_on_the_audit_page_at_desk_and_phone_sizes(stack, browser, admin_user):
    import time

    from dashboard.models import AuditThreshold, ConfigSnapshot

    wait = time.monotonic() + 20
    while not ConfigSnapshot.objects.filter(engine__host=stack.host).exists():
        assert time.monotonic() < wait, "no snapshot observed"
        time.sleep(0.2)
    s = Session(browser, stack.base, admin_user)
    page = s.page
    url = f"{stack.base}/hosts/{stack.host.name}/audit/"
    page.goto(url + "#thresholds")
    jobs, headroom = "#id_compile_caps__max_jobs", "#id_memory_share_sum__headroom"
    assert page.input_value(jobs) == "4" and page.input_value(headroom) == "0.15"
    page.fill(jobs, "0")
    page.fill(headroom, "0.95")
    page.click("text=Save thresholds")
    row = page.locator("[data-field-row=compile_caps__max_jobs] .errorlist")
    row.wait_for(timeout=10000)
    assert "greater than or equal to 1" in row.inner_text()
    assert (
        "less than or equal to 0.9"
        in page.locator("[data-field-row=memory_share_sum__headroom] .errorlist").inner_text()
    )
    assert page.input_value(headroom) == "0.95"  # what was typed stays, at its field
    assert not AuditThreshold.objects.exists()
    page.evaluate("window.scrollTo(0, 0)")  # the sticky top bar stays at the top of a full-page shot
    s.shot("audit-thresholds-error-desk")
    page.fill(jobs, "8")
    page.fill(headroom, "0.2")
    page.click("text=Save thresholds")
    page.locator(".messages li").wait_for(timeout=10000)
    assert "Saved compile_caps.max_jobs, memory_share_sum.headroom." in page.locator(".messages").inner_text()
    assert page.input_value(jobs) == "8"
    assert page.locator("[data-field-row=compile_caps__max_jobs] .badge.stored").count() == 1
    assert dict(AuditThreshold.objects.values_list("name", "value")) == {"max_jobs": "8", "headroom": "0.2"}
    page.evaluate("window.scrollTo(0, 0)")
    s.shot("audit-thresholds-desk")

    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(url + "#thresholds")
    page.locator("#thresholds").wait_for()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390, "the page scrolls sideways on a phone"
    box = page.locator(jobs).bounding_box()
    assert box["height"] >= 40 and box["x"] + box["width"] <= 390  # thumb-sized, on the screen
    page.fill(jobs, "300")
    page.click("text=Save thresholds")
    page.locator("[data-field-row=compile_caps__max_jobs] .errorlist").wait_for(timeout=10000)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    s.shot("audit-thresholds-error-phone")
    page.locator("#thresholds").screenshot(
        path=str(s.shot("audit-thresholds-error-phone").with_name("audit-thresholds-form-phone.png"))
    )
    page.goto(url)
    s.shot("audit-thresholds-phone")
    assert AuditThreshold.objects.get(name="max_jobs").value == "8"
    refused = ("HTTP 400 ", "Failed to load resource: the server responded with a status of 400")
    errors = [e for e in s.errors if not e.startswith(refused)]  # the two refused posts
    assert not errors, errors
