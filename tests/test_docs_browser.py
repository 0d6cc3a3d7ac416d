"""The manual SparkOps serves at /docs/, in real headless Chromium: Material for MkDocs' pages run
under the product's Content-Security-Policy (its inline scripts allowed by hash, nothing else) with no
console error, page error or violation, and a cause's link lands on its section. It needs the built
site (`make docs`; CI builds it before the tests) and is skipped, saying so, without it."""

from pathlib import Path

import pytest

from tests.chromium import skip_without_chromium
from tests.live.test_browser import browser  # noqa: F401  (browser: the shared Chromium fixture)
from tests.test_csp_browser import RECORD_VIOLATIONS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

skip_without_chromium()
SITE = Path(__file__).resolve().parent.parent / "site"
if not (SITE / "alerts" / "index.html").is_file():
    pytest.skip("needs the built manual in site/: run `make docs`", allow_module_level=True)


def test_the_manual_runs_under_the_csp_and_a_cause_lands_on_its_section(browser, shared_web):
    base = shared_web[1]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(RECORD_VIOLATIONS)
    page, errors = context.new_page(), []
    page.on("console", lambda m: m.type == "error" and errors.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    page.on("response", lambda r: r.status >= 400 and errors.append(f"HTTP {r.status} {r.url}"))
    for path in ("/docs/", "/docs/alerts/#exit0_no_restart", "/docs/cli/"):
        response = page.goto(base + path)
        assert response.status == 200, path
        script_src = next(p for p in response.headers["content-security-policy"].split(";") if "script-src" in p)
        assert "'unsafe-inline'" not in script_src and "sha256-" in script_src, script_src
        page.wait_for_load_state("load")
        page.wait_for_function("() => typeof __md_scope !== 'undefined'")  # Material's inline script ran
        assert page.evaluate("window.__csp || []") == [], path
    page.goto(base + "/docs/alerts/#exit0_no_restart")
    assert page.locator("#exit0_no_restart").inner_text().startswith("exit0_no_restart")
    assert errors == []
