"""Real headless Chromium on the planner page: moving a share changes the predictions without a
reload (the same numbers as `sparkops plan`), "Record as a claim" writes the change-log entry,
and the change log lists it. Screenshots at desk and phone sizes in artifacts/screenshots/."""

from pathlib import Path

import pytest

from dashboard.models.ledgers import GIB
from sparkops.changelog.models import Entry
from sparkops.planner.models import BoxSetting
from tests.chromium import ARGS, CHROMIUM, skip_without_chromium

from .appendix import THROUGH_0819
from .conftest import feed, plan_json

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"

skip_without_chromium()


@pytest.fixture
def browser(asgi_server, operator, monkeypatch):
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop in this thread
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _login(browser, asgi_server, viewport):
    page = browser.new_page(viewport=viewport)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.goto(asgi_server.url + "/login/?next=/changelog/")
    page.fill("#id_username", "otto")
    page.fill("#id_password", "otto-password-123")
    page.click("button[type=submit]")
    page.wait_for_url(asgi_server.url + "/changelog/")
    page.errors = errors
    return page


GRID = {
    "nemotron": (0.2, 0.22, 0.25, 0.27, 0.3, 0.4),
    "q38": (0.3, 0.38, 0.41, 0.45, 0.6),
    "qwen3-next-80b": (0.5, 0.6),
}
KEYS = ("pool_tokens", "kv_gib", "concurrency", "naive_concurrency", "corrected_concurrency", "concurrency_range")


def _same_numbers_as_the_model(page, host):
    """The page's script and sparkops/planner/engine_model.py agree over a grid of shares and windows."""
    from sparkops.planner.engine_model import PlanError
    from sparkops.planner.services import box_of, engine_model

    checked, watched = 0, host.engines.filter(retired_at__isnull=True)  # a retired one is not planned (issue 31)
    for engine in watched:
        model = engine_model(engine, box_of(host)["memory_gib"])
        for share in GRID.get(engine.name, ()):
            for window in (65536, 131072, 262144, 524288):
                js = page.evaluate(
                    "([n, s, w]) => { const p = window.sparkopsPlanner; try { return p.predict(p.models[n], s, w); }"
                    " catch (e) { return {error: e.message}; } }",
                    [engine.name, share, window],
                )
                try:
                    py = model.predict(share, window)
                except PlanError as exc:
                    assert js.get("error"), (engine.name, share, window, str(exc))
                    continue
                got = {k: js.get(k) for k in KEYS}
                want = {k: py[k] for k in KEYS}
                assert abs(got.pop("pool_tokens") - want.pop("pool_tokens")) <= 1
                assert got == want, (engine.name, share, window)
                assert [r["id"] for r in js["basis"]] == [r["id"] for r in py["basis"]]
                assert js["raise_basis"] == py["raise_basis"] and js["method"] == py["method"]
                checked += 1
    assert checked == 4 * sum(len(GRID[e.name]) for e in watched)  # every share predicts at every window


@pytest.fixture
def field_box(spark):
    feed(THROUGH_0819)
    spark.latest = {"host": {"mem_total_bytes": 121 * GIB, "mem_used_bytes": 100 * GIB}}
    spark.save(update_fields=["latest"])
    BoxSetting.objects.create(host=spark, headroom_gib=20)
    return spark


def test_share_moves_predictions_then_record_the_claim(browser, asgi_server, field_box):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = _login(browser, asgi_server, {"width": 1280, "height": 800})
    page.goto(f"{asgi_server.url}/planner/{field_box.name}/")
    card = page.locator("#plan-nemotron")
    conc = card.locator('[data-out="concurrency"]')
    assert conc.inner_text() == "21.19× at 131,072"  # the measured row at its current share
    page.evaluate("window.__noReload = 1")
    _same_numbers_as_the_model(page, field_box)

    card.locator("input[name=util]").fill("0.30")  # move the share
    expected = plan_json("--engine", "nemotron", "--util", "0.30")
    page.wait_for_function(
        "document.querySelector('#plan-nemotron [data-out=concurrency]').innerText.startsWith('33.')"
    )
    assert conc.inner_text() == f"{expected['concurrency']:.2f}× at 131,072"
    assert page.evaluate("window.__noReload") == 1  # the same document: no reload
    assert conc.inner_text() == "33.36× at 131,072"  # 4,372,707 / 131,072: the row measured at 0.30

    card.locator("input[name=util]").fill("0.25")
    card.locator("input[name=window]").fill("262144")  # the 2026-08-20 raise
    raised = plan_json("--engine", "nemotron", "--util", "0.25", "--window", "262144")
    page.wait_for_function("document.querySelector('#plan-nemotron [data-out=raise]').innerText.startsWith('naive')")
    text = card.locator('[data-out="raise"]').inner_text()
    assert (
        f"naive {raised['naive_concurrency']:.2f}×" in text
        and "no earlier raise of this engine is in the ledger" in text
    )
    assert card.locator('[data-out="pool_tokens"]').inner_text() == f"{raised['pool_tokens']:,} tokens"
    assert "GiB free" in page.inner_text("#box-plan")

    page.locator("#plan-q38 .min").fill("3")  # the suggestion: q38 is the KV-starved half
    page.locator("#plan-q38 input[name=window]").fill("262144")
    page.wait_for_function("document.querySelector('#suggestion').innerText.includes('fewest tokens per GiB')")
    assert "goes to q38" in page.inner_text("#suggestion")
    page.screenshot(path=str(SHOTS / "planner-desk.png"), full_page=True)

    card.get_by_role("button", name="Record as a claim").click()
    page.wait_for_selector("#entry-title")
    entry = Entry.objects.get()
    assert page.url == asgi_server.url + entry.get_absolute_url()
    claim = entry.claims.get(metric="concurrency")
    assert (claim.predicted, claim.window, claim.engine.name) == (raised["concurrency"], 262144, "nemotron")

    page.goto(asgi_server.url + "/changelog/")
    assert entry.title in page.inner_text("body")  # the change log lists it
    assert page.errors == []

    phone = _login(browser, asgi_server, {"width": 390, "height": 844})
    phone.goto(f"{asgi_server.url}/planner/{field_box.name}/")
    phone.locator("#plan-q38 input[name=util]").fill("0.38")
    phone.wait_for_function("document.querySelector('#plan-q38 [data-out=concurrency]').innerText.startsWith('4.')")
    assert phone.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")  # no sideways scroll
    phone.screenshot(path=str(SHOTS / "planner-phone.png"), full_page=True)
    assert phone.errors == []
