"""Issue 51, rough edge 2, in real headless Chromium: out of the box (the demo's box: demo-vllm at vLLM's
default 0.9 beside a hand-run engine at 0.15) the planner page starts from a split within the audit's limit
(0.85) and shows a usable plan with free memory, not "−6.0 GiB free"; the suggestion offers that split."""

import pytest

from tests.chromium import skip_without_chromium

from .test_rough_edges_share_limit import demo_box  # noqa: F401 — the demo's box

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
skip_without_chromium()


def test_the_demo_box_opens_on_a_plan_within_the_audits_limit(chromium, shared_web, viewer, demo_box):
    from tests.live.test_browser import Session

    _proc, base, _log = shared_web
    session = Session(chromium, base, viewer, viewport=(1280, 800))
    page = session.page
    page.goto(f"{base}/planner/{demo_box.name}/")
    page.wait_for_function("document.querySelector('#box-plan').innerText.includes('shares sum to')")
    assert page.input_value("#plan-demo-vllm input[name=util]") == "0.70"
    assert page.input_value("#plan-hand-run-30695 input[name=util]") == "0.15"  # not predictable: kept
    plan = page.inner_text("#box-plan")
    assert "shares sum to 0.85 of at most 0.85" in plan and "over the audit" not in plan, plan
    assert "GiB free" in plan and "-" not in plan.split("GiB free")[0].split(",")[-1], plan
    assert "demo-vllm 0.9 + hand-run-30695 0.15 now" in page.inner_text("#plan-start")
    assert "util 0.70" in page.inner_text("#suggestion")
    assert page.is_enabled("#apply-suggestion")
    assert page.inner_text("#plan-demo-vllm [data-out=error]") == ""
    assert not session.errors, session.errors
