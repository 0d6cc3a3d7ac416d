"""Issue 19 in real headless Chromium, at a desk (1280×800) and on a phone (390×844): a fresh start
is quiet, a down card carries its fix, silenced and acknowledged alerts are marked, bad input is refused
at the field, the time range lives in the URL and no page scrolls sideways. Screenshots go to
artifacts/screenshots/ (NAME-desk.png, NAME-phone.png)."""
import time

import pytest

from .test_browser import SHOTS, Session, _live, browser, stack, wait_for_js  # noqa: F401 — fixtures

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SIZES = {"desk": (1280, 800), "phone": (390, 844)}


class SizedSession(Session):
    def __init__(self, browser, base, user, size):
        super().__init__(browser, base, user)
        self.size = size
        width, height = SIZES[size]
        self.page.set_viewport_size({"width": width, "height": height})

    def shot(self, name):
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name}-{self.size}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


def _wait_ticks(stack, n, timeout=30):
    """Until the resident poller has run N more metrics ticks (each evaluates every engine's rules)."""
    cycles = stack.poller.poller.cycles
    target, deadline = cycles["metrics"] + n, time.monotonic() + timeout
    while cycles["metrics"] < target:
        assert time.monotonic() < deadline, f"the poller did not run {n} metrics ticks in {timeout} s"
        time.sleep(0.1)


def _cards_up(page, stack):
    for engine in stack.engines.values():
        page.locator(f"#engine-card-{engine.id}.status-up").wait_for(timeout=15000)


@pytest.mark.parametrize("size", SIZES)
def test_a_fresh_start_fires_nothing_and_shades_no_chart(stack, browser, operator, size):
    """The simulated units run with Restart=on-failure (as the demo's do): the advisory stays quiet."""
    ops = SizedSession(browser, stack.base, operator, size)
    page = ops.page
    _live(page)
    _cards_up(page, stack)
    _wait_ticks(stack, 3)
    page.reload()
    _live(page)
    assert page.locator("#firing-alerts .alert-row").count() == 0, page.locator("#firing-alerts").inner_text()
    assert "Nothing firing" in page.locator("#firing-alerts").inner_text()
    assert page.locator(".card [data-field=alert]").count() == 0
    ops.shot("overview-fresh")
    vllm = stack.engines["sim-vllm"]
    page.goto(f"{stack.base}/engines/{vllm.name}/")
    wait_for_js(page, "window.sparkopsLive && window.sparkopsLive.chartData && window.sparkopsLive.chartData.panels")
    assert page.evaluate("window.sparkopsLive.chartData.alerts") == []
    page.wait_for_selector("#chart-tokens .main-svg", timeout=10000)
    ops.shot("engine-detail-fresh")
    assert not ops.errors, ops.errors
