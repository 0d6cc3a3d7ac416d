"""Real headless Chromium writes an entry and a correction through the forms, then reads the
ledgers page with its Plotly chart."""

import pytest

from dashboard.models import KVPoolEntry
from sparkops.changelog.models import Entry
from tests.chromium import ARGS, CHROMIUM, skip_without_chromium

from .conftest import at

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

skip_without_chromium()


@pytest.fixture
def page(asgi_server, operator, monkeypatch):
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop in this thread
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        # Straight to the change log: the overview's WebSocket needs the ASGI server, not asgi_server.
        page.goto(asgi_server.url + "/login/?next=/changelog/")
        page.fill("#id_username", "otto")
        page.fill("#id_password", "otto-password-123")
        page.click("button[type=submit]")
        page.wait_for_url(asgi_server.url + "/changelog/")
        page.errors = errors
        yield page
        browser.close()


def test_operator_writes_an_entry_and_a_correction(page, asgi_server, pair):
    page.goto(asgi_server.url + "/changelog/new/")
    page.fill("#id_effective_at", "2026-08-20T09:00")
    page.select_option("#id_kind", "claim")
    page.fill("#id_title", "Raise --max-model-len to 262,144")
    page.check(f"input[name=engines][value='{pair['nemotron'].pk}']")
    page.fill("#id_flags", "--max-model-len: 131072 → 262144")
    page.fill("#id_body_md", "vLLM sizes its KV pool at boot; **max-model-len** is a per-request ceiling.")
    page.fill("#id_claims-0-text", "raising --max-model-len 131,072 → 262,144 allocates nothing")
    page.select_option("#id_claims-0-metric", "concurrency")
    page.fill("#id_claims-0-predicted", "10.6")
    page.fill("#id_claims-0-window", "262144")
    page.click("#save-entry")
    page.wait_for_selector("#entry-title")
    entry = Entry.objects.get()
    assert page.url == asgi_server.url + entry.get_absolute_url()
    assert page.inner_text("#entry-body strong") == "max-model-len"

    KVPoolEntry.objects.create(
        recorded_at=at("2026-08-20 09:05"),
        engine=pair["nemotron"],
        pool_tokens=2_703_604,
        window=262144,
        concurrency=10.31,
        source="collector",
    )
    page.reload()
    claim = entry.claims.get()
    assert "Write a correction against this claim" in page.inner_text(f"#claim-{claim.pk}")
    page.click(f"#invite-{claim.pk} a")
    assert page.input_value("#id_target") == str(claim.pk)  # the invitation preselects the claim
    page.fill("#id_corrected_at", "2026-08-20T14:00")
    page.select_option("#id_mark", "superseded")
    page.fill("#id_text_md", "Cheap, not free: the pool shrank 2.7 %, 10.31× measured.")
    page.click("#save-correction")
    page.wait_for_selector(f"#claim-{claim.pk} .correction")

    original = page.inner_text(f"#claim-{claim.pk} .original")
    beside = page.inner_text(f"#claim-{claim.pk} .claim-corrections")
    assert "raising --max-model-len 131,072 → 262,144 allocates nothing" in original
    assert "corrected on 2026-08-20 14:00" in original and "superseded" in original
    assert "Correction 2026-08-20 14:00" in beside and "Cheap, not free" in beside
    boxes = [page.locator(f"#claim-{claim.pk} {sel}").bounding_box() for sel in (".original", ".claim-corrections")]
    assert boxes[1]["x"] > boxes[0]["x"] + boxes[0]["width"] - 1  # beside, on the same row
    assert page.errors == []


def test_bad_entry_shows_the_reason_and_saves_nothing(page, asgi_server, pair):
    page.goto(asgi_server.url + "/changelog/new/")
    page.fill("#id_title", "Raise the window")
    page.fill("#id_flags", "--max-model-len 131072 262144")
    page.click("#save-entry")
    page.wait_for_selector(".errorlist")
    assert "a flag change reads" in page.inner_text("#entry-form")
    assert "Nothing was saved" in page.inner_text(".messages")
    assert Entry.objects.count() == 0


def test_ledgers_page_draws_the_pool_chart(page, asgi_server, pair):
    for when, pool in (("2026-08-19 12:00", 2_777_998), ("2026-08-20 14:00", 2_703_604)):
        KVPoolEntry.objects.create(recorded_at=at(when), engine=pair["nemotron"], pool_tokens=pool, window=262144)
    page.goto(asgi_server.url + "/changelog/ledgers/")
    page.wait_for_selector("#pool-chart .main-svg", timeout=10000)
    assert page.locator("#pool-chart .scatterlayer .trace").count() == 1
    assert "2,703,604" in page.inner_text("#kvpool-table")
    assert page.errors == []


def test_operator_imports_a_fenced_log_after_its_dry_run_then_asks_what_is_believed(page, asgi_server, pair, tmp_path):
    """Issue 14's "done when": the import page shows the dry run before anything is written, a
    fenced block's '## ' and '> Correction' lines stay text, then the claims view answers."""
    from .test_claims_and_import_pages import LOG
    from .test_liberal_reading import FENCED

    log = tmp_path / "hand-kept.md"
    log.write_text(
        LOG + "\n" + FENCED + "\n## 2026-08-24 - Old driver notes\nEngines: driver-80b\nkind: claim\n"
        "Claim: the 80B driver needs 0.55\n"
    )
    page.goto(asgi_server.url + "/changelog/")
    page.click("#import-link")
    page.set_input_files("#id_file", str(log))
    page.click("#preview")
    page.wait_for_selector("#dry-run")
    summary = page.inner_text("#dry-run-summary")
    assert "4 new entries, 4 new correction(s)" in summary and "driver-80b" in summary
    assert "text after the correction of line" in page.inner_text("#dry-run-items")
    assert not Entry.objects.exists()  # shown, not written
    page.click("#do-import")
    page.wait_for_url(asgi_server.url + "/changelog/")
    assert "Imported: 4 new entries" in page.inner_text(".messages")
    fenced = Entry.objects.get(title="Pin the chat template")
    assert "## not an entry: a comment in the unit" in fenced.body_md and fenced.corrections.count() == 1

    page.click("#claims-link")
    page.wait_for_selector("#claims-table")
    page.click("#believed-links a[data-engine='q38']")
    page.wait_for_url("**/changelog/claims/?engine=q38&state=believed")
    rows = page.locator("#claims-table tr.claim-row")
    states = {rows.nth(i).get_attribute("data-state") for i in range(rows.count())}
    assert rows.count() == 3 and states == {"standing", "corrected"}
    assert "0.40 each is enough" in page.inner_text("#claims-table")
    assert "(retired)" in page.inner_text("#believed-links")  # driver-80b: a retired record from the log
    assert page.errors == []
