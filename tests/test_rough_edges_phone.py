"""Issue 51, rough edge 1, in real headless Chromium: every page the crawl knows (tests/test_crawl.py: every
URL pattern, with a real row for each argument, over its world of one of everything), opened on a phone
(390×844) and at a desk (1280×800):

- no page scrolls sideways (document.scrollingElement.scrollWidth <= innerWidth);
- no word breaks inside a title (h1–h3, a card's header, a legend), a table cell or a term: each word's own
  text range lies on one line (in titles a word is what lies between spaces, so "demo-vllm" stays whole;
  in cells and terms, Unicode's words, as tests/live/test_tables.py measures them);
- on the phone, every control a thumb uses (buttons, inputs, selects, the menu's links) is at least 24×24 px
  (WCAG 2.2's minimum target size), and the timestamp column of the alert timeline, the claims, /engines/
  and /hosts/ takes at most 30 % of its table;
- no date input is narrower than the date it shows.

Screenshots of the pages the issue names go to artifacts/screenshots/rough-edges-NAME-SIZE.png."""

import contextlib
import re
from pathlib import Path

import pytest
from playwright.sync_api import Error as PlaywrightError

from tests.chromium import skip_without_chromium

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
skip_without_chromium()

SHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
PHONE, DESK = (390, 844), (1280, 800)
# Not the app's pages: the admin's, data (API, charts, metrics, health), the live view's fragments, the docs site.
NOT_PAGES = re.compile(r"^/(admin/|api/|metrics|healthz|livez|charts/|live/|docs/|static/|manifest|sw\.js|logout)")

# One pass over the page; returns a list of sentences, one per fault (empty: the page is fine).
MEASURE = r"""(phone) => {
  const STAMPED = ['/alerts/', '/changelog/claims/', '/engines/', '/hosts/'];  // where a 40 % timestamp column was seen
  const faults = [];
  const shown = el => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden';
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
    + (typeof el.className === 'string' && el.className.trim() ? '.' + el.className.trim().split(/\s+/).join('.') : '');
  const width = innerWidth;
  if (document.scrollingElement.scrollWidth > width)
    faults.push(`scrolls sideways: ${document.scrollingElement.scrollWidth} px in ${width}`);

  // Words broken across lines: a word's text range with boxes on more than one line.
  const lines = range => new Set(Array.from(range.getClientRects()).filter(r => r.width > 0.5)
    .map(r => Math.round(r.top + r.height / 2))).size;
  const segmenter = new Intl.Segmenter('en', {granularity: 'word'});
  const TITLES = 'h1, h2, h3, .card > header, legend';
  const CELLS = 'td, th, dt';
  const check = (root, titles) => {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const parent = node.parentElement;
      if (!parent || !shown(parent) || parent.closest('.js-plotly-plot, svg, pre, textarea')) continue;
      if (!titles && parent.closest(CELLS) !== root) continue;  // a nested table's cells are their own
      const words = [];
      if (titles) {
        for (const m of node.data.matchAll(/\S+/g)) if (m[0].length <= 40) words.push([m.index, m[0]]);
      } else {
        for (const s of segmenter.segment(node.data)) if (s.isWordLike && s.segment.length <= 40) words.push([s.index, s.segment]);
      }
      for (const [at, word] of words) {
        const range = document.createRange();
        range.setStart(node, at);
        range.setEnd(node, at + word.length);
        if (lines(range) > 1) faults.push(`"${word}" breaks across lines in ${name(root)}`);
      }
    }
  };
  for (const el of document.querySelectorAll(TITLES)) if (shown(el)) check(el, true);
  // A date and time in a cell is two words, "2026-12-06" and "19:28:44": neither breaks at its hyphens or colons.
  const STAMP = /^\d{4}-\d{2}-\d{2}( \d{2}:\d{2}(:\d{2})?)?( UTC)?$/;
  for (const el of document.querySelectorAll(CELLS))
    if (shown(el) && !el.closest(TITLES)) check(el, STAMP.test(el.textContent.trim()));

  // Tap targets: what a thumb presses, at least 24×24 px (on the phone).
  const CONTROLS = 'button, input:not([type=hidden]), select, summary, .mainnav a, a.button';
  for (const el of phone ? document.querySelectorAll(CONTROLS) : []) {
    if (!shown(el) || el.closest('.js-plotly-plot')) continue;
    const r = el.getBoundingClientRect();
    if (r.width < 23.5 || r.height < 23.5)
      faults.push(`${name(el)}${el.name ? '[name=' + el.name + ']' : ''} is ${r.width.toFixed(0)}×${r.height.toFixed(0)} px`);
  }
  // A date input narrower than the date it shows clips it: measured against a copy of itself at its own width.
  for (const el of document.querySelectorAll('input[type=date], input[type=datetime-local], input[type=time]')) {
    if (!shown(el)) continue;
    const copy = el.cloneNode();
    copy.removeAttribute('id');
    copy.removeAttribute('class');
    copy.style.cssText = 'position:absolute; visibility:hidden; width:auto; min-width:0; max-width:none; left:0; top:0';
    el.after(copy);  // beside it: the same font
    const needs = copy.getBoundingClientRect().width, has = el.getBoundingClientRect().width;
    copy.remove();
    if (has + 1 < needs) faults.push(`${name(el)}[name=${el.name}] is ${has.toFixed(0)} px, its date needs ${needs.toFixed(0)}`);
  }
  // Timestamp columns: a column of dates and times takes at most 30 % of its table.
  if (phone && STAMPED.some(p => location.pathname.startsWith(p)) && location.pathname !== '/alerts/rules/') {
    for (const table of document.querySelectorAll('table')) {
      if (!shown(table) || table.rows.length < 2 || table.rows[0].cells.length < 3) continue;
      const row = Array.from(table.tBodies[0] ? table.tBodies[0].rows : []).find(r => r.cells.length === table.rows[0].cells.length);
      if (!row) continue;
      for (const cell of row.cells) {
        if (!STAMP.test(cell.textContent.trim())) continue;
        const share = cell.getBoundingClientRect().width / table.getBoundingClientRect().width;
        if (share > 0.3) faults.push(`${name(table)}: its timestamp column takes ${(share * 100).toFixed(0)} % of it`);
      }
    }
  }
  return faults;
}"""

SETTLED = (
    "() => document.fonts.ready.then(() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r))))"
)


@pytest.fixture
def world(admin_user):
    """The crawl's world, built in a thread of its own: Playwright's event loop holds this one, and the
    probes it measures against simulated engines run loops of their own."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.test_crawl import build_world

    def build():
        from django.db import connection

        try:
            return build_world(admin_user)
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        world = pool.submit(build).result()
    _the_demos_engines()
    return world


def _the_demos_engines():
    """The two engines whose card headers the issue saw broken: a name beside a long kind badge and an audit
    badge (demo-llama: letter by letter on a phone; demo-vllm: at its hyphen at a desk). Their box runs unit
    actions, so the unit-fix page shows its Apply buttons."""
    from django.utils import timezone

    from dashboard.models import ConfigSnapshot, Engine, Host
    from tests.launchconfig.test_thresholds import ENV

    spark = Host.objects.get(name="spark")
    Host.objects.filter(pk=spark.pk).update(unit_actions=True)
    for name, kind in (("demo-llama", "llamacpp"), ("demo-vllm", "vllm")):
        engine = Engine.objects.create(
            name=name, kind=kind, url="http://127.0.0.1:9", host=spark, unit=f"{name}.service", status="up"
        )
        unit = {
            "unit": engine.unit,
            "restart": "on-failure",
            "load_state": "loaded",
            "fragment_path": f"/etc/systemd/system/{engine.unit}",
        }
        data = {"unit": unit, "environment": ENV, "flags": {"flags": {}}}
        ConfigSnapshot.objects.create(engine=engine, observed_at=timezone.now(), hash=f"{engine.pk:064d}", data=data)


def _pages():
    """One path per view the crawl knows (its first, real, argument), pages only: no admin, API or data URL."""
    from tests.test_crawl import crawl_paths

    seen: dict[str, str] = {}
    for name, path in crawl_paths():
        seen.setdefault(name, path)
    return sorted({p for p in seen.values() if not NOT_PAGES.match(p)})


def _session(browser, base, user, size):
    from tests.live.test_browser import Session

    return Session(browser, base, user, viewport=size)


def _visit(page, url):
    """The page, its charts drawn when it has any, fonts loaded: None when it is not an HTML page."""
    try:
        response = page.goto(url)
    except PlaywrightError:  # a download (an export): not a page
        return None
    if response is None or response.status not in (200, 404):
        return None
    if "text/html" not in (response.headers.get("content-type") or ""):
        return None
    if page.locator(".chart, [data-chart], #charts, .chart-panel, #pool-chart").count():
        with contextlib.suppress(PlaywrightError):  # a chart with nothing to draw: measured as it is
            page.wait_for_selector(".main-svg", timeout=8000)
    page.wait_for_load_state("load")
    page.evaluate(SETTLED)
    return response


SHOT = {
    "/": "overview",
    "/engines/demo-llama/": "engine",
    "/engines/demo-vllm/audit/": "engine-audit",
    "/hosts/spark/audit/": "host-audit",
    "/changelog/ledgers/": "ledgers",
    "/engines/demo-llama/audit/fix/": "unit-fix",
    "/bench/": "bench",
    "/alerts/rules/": "rules",
    "/planner/spark/": "planner",
    "/engines/": "engines",
}


def test_every_page_fits_a_phone_keeps_words_whole_and_its_controls_thumb_sized(
    chromium, shared_web, admin_user, world
):
    _proc, base, _log = shared_web
    pages = _pages()
    assert len(pages) > 40, pages
    alert = world["alert_ref"]
    # the timeline of a resolved alert; the demo's engines, their audits and unit fix; the 404 page
    pages += [f"/alerts/{alert.pk}/", "/no/such/page/"]
    pages += [f"/engines/{n}/{tail}" for n in ("demo-llama", "demo-vllm") for tail in ("", "audit/", "audit/fix/")]
    faults, visited = [], 0
    SHOTS.mkdir(parents=True, exist_ok=True)
    for label, size, paths in (("phone", PHONE, pages), ("desk", DESK, pages)):
        session = _session(chromium, base, admin_user, size)
        page = session.page
        for path in paths:
            if _visit(page, base + path) is None:
                continue
            visited += 1
            faults += [f"{label} {path}: {f}" for f in page.evaluate(MEASURE, label == "phone")]
            if path == "/changelog/ledgers/" and label == "phone":  # its "Change-log entries" column was cut
                box = page.evaluate(
                    "(b => [b.scrollWidth, b.clientWidth])(document.querySelector('#incident-table').parentElement)"
                )
                if box[0] > box[1] + 1:
                    faults.append(f"phone {path}: the incident ledger scrolls ({box[0]} px in {box[1]})")
            if path in SHOT:
                page.screenshot(path=str(SHOTS / f"rough-edges-{SHOT[path]}-{label}.png"), full_page=True)
        session.context.close()
    assert visited > 40, visited
    faults = list(dict.fromkeys(faults))
    assert faults == [], f"{len(faults)} faults on {visited} pages:\n" + "\n".join(faults[:150])
