"""The "request contract (live)" panel in real headless Chromium at a desk (1280×800) and on a
phone (390×844), after the real poller read simulated traffic: shares, the edge of the window,
the timeout cut and the quoted peg-native line; no page scrolls sideways. Screenshots go to
artifacts/screenshots/contract-<engine>-<size>.png."""

import pytest

from dashboard.models import Engine
from tests.chromium import ARGS, CHROMIUM
from tests.live.test_browser import SHOTS, Session
from tests.live.test_phone_browser import SIZES, _no_sideways_scroll, web  # noqa: F401 — fixture
from tests.polls import poll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _poll_both(engines):
    poll(*Engine.objects.select_related("host").filter(pk__in=[e.pk for e in engines.values()]).order_by("pk"))


def test_the_panel_at_desk_and_phone_sizes(sim, engines, settings, viewer, web):
    settings.SPARKOPS_CONTRACT_WINDOW_S = settings.SPARKOPS_CONTRACT_CUT_WINDOW_S = 600.0
    _poll_both(engines)
    sim.traffic("ctr-vllm", 40, finish_reason={"stop": 30, "length": 8, "abort": 1, "repetition": 1})
    sim.traffic("ctr-vllm", 12, prompt_tokens=30000)
    sim.traffic("ctr-llama", 3, status=400, prompt_tokens=9000)
    sim.traffic("ctr-llama", 1, peg_native="<tool_call>\n<function=read_file>\n</function>\n</tool_call>\n<think>")
    _poll_both(engines)
    for seconds in (600.01, 600.0, 600.02):
        sim.traffic("ctr-vllm", 1, finish_reason="abort", e2e_s=seconds)
        _poll_both(engines)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:  # after the polls: Playwright's sync API holds an event loop in this thread
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        _look(Session(browser, web.base, viewer), web.base)
        browser.close()


def _look(session, base):
    for size, (width, height) in SIZES.items():
        session.page.set_viewport_size({"width": width, "height": height})
        for name in ("ctr-vllm", "ctr-llama"):
            session.page.goto(f"{base}/engines/{name}/")
            panel = session.page.locator("#contract-live")
            panel.wait_for()
            text = panel.inner_text()
            if name == "ctr-vllm":
                assert "3 requests ended at 600 s" in text and "12 of 55 prompts over 20,000 tokens" in text
            else:
                assert "unparsed peg-native output: <tool_call>" in text and "3 HTTP 400" in text
            # The panel is live (re-rendered on updates): scroll to whichever node is there now.
            session.page.evaluate("document.getElementById('contract-live').scrollIntoView()")
            SHOTS.mkdir(parents=True, exist_ok=True)
            session.page.screenshot(path=str(SHOTS / f"contract-{name}-{size}.png"), full_page=True)
            assert _no_sideways_scroll(session.page), f"{name}'s page scrolls sideways at {size} size"
    assert not session.errors, session.errors
