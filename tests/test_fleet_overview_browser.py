"""The Hosts grid in real headless Chromium (issue 48, item 6), against the test process's uvicorn
and the Redis channel layer: at 1440×900 the 50 tiles of a 50 × 3 fleet fit the screen with no
vertical scroll; at 390×844 they are one column; at both, no sideways scroll, no word broken across
lines, thumb-sized controls (tests/test_rough_edges_phone.py's measure); one engine going down,
sent by the leader's watch over the WebSocket, changes that one chip and moves its box up, and
nothing else; a box that comes has the page fetch its grid again. Screenshots (SPARKOPS_SCREENSHOTS=1) go to artifacts/screenshots/fleet-overview-*.png."""

import pytest
from django.conf import settings
from django.utils import timezone

from dashboard.models import Engine, Host
from sparkops.live.fleet import FleetWatch
from sparkops.live.presence import sockets
from tests.chromium import skip_without_chromium
from tests.fleetgrid import seed_fleet
from tests.live.helpers import session_key
from tests.live.test_browser import SHOTS, browser, wait_for_js  # noqa: F401  (browser: the shared Chromium)
from tests.test_rough_edges_phone import MEASURE  # a page's rough edges: sideways scroll, broken words, tap targets

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

skip_without_chromium()

DESK, PHONE = (1440, 900), (390, 844)
# Where each tile is, in the grid's order: [name, left, top, bottom, chip words].
TILES = """JSON.stringify(Array.from(document.querySelectorAll('#fleet-grid .tile')).map(t => {
  const r = t.getBoundingClientRect();
  return [t.dataset.name, Math.round(r.left), Math.round(r.top), Math.round(r.bottom),
          Array.from(t.querySelectorAll('.chip-word')).map(c => c.textContent)];
}))"""


def _open(browser, base, user, size):
    width, height = size
    context = browser.new_context(viewport={"width": width, "height": height})
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session_key(user), "url": base}])
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.goto(base + "/hosts/")
    return page, errors


def _tiles(page):
    import json

    return json.loads(page.evaluate(TILES))


def test_fifty_boxes_fit_a_desk_screen(browser, shared_web, viewer):
    seed_fleet(50)
    page, errors = _open(browser, shared_web[1], viewer, DESK)
    tiles = _tiles(page)
    assert len(tiles) == 50
    # Problems first. box-08's report was 14 s old when seeded: stale, and unreachable past 16 s on a slow run
    # (then it sorts among the unreachable), so the order is read without it.
    assert [t[0] for t in tiles[:4] if t[0] != "box-08"][:3] == ["box-03", "box-17", "box-30"]
    bottom = max(t[3] for t in tiles)
    assert bottom <= DESK[1], f"the grid ends at {bottom} px, below the {DESK[1]} px screen"
    assert page.evaluate("document.documentElement.scrollWidth") <= DESK[0]
    assert len({t[1] for t in tiles}) >= 8  # columns, not a long list
    assert page.evaluate(MEASURE, False) == []
    page.screenshot(path=str(SHOTS / "fleet-overview-desk.png"))
    assert errors == []


def test_a_phone_shows_one_column(browser, shared_web, viewer):
    seed_fleet(50)
    page, errors = _open(browser, shared_web[1], viewer, PHONE)
    tiles = _tiles(page)
    assert len(tiles) == 50 and len({t[1] for t in tiles}) == 1, "more than one column on a phone"
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE[0], "the page scrolls sideways"
    words = page.evaluate("getComputedStyle(document.querySelector('.chip-word')).fontSize")
    assert float(words.removesuffix("px")) >= 12
    assert page.evaluate(MEASURE, True) == []
    page.screenshot(path=str(SHOTS / "fleet-overview-phone.png"), full_page=False)
    assert errors == []


def test_an_engine_going_down_changes_its_one_chip(browser, shared_web, viewer):
    seeded = seed_fleet(50)
    page, errors = _open(browser, shared_web[1], viewer, DESK)
    wait_for_js(page, "window.sparkopsFleet && window.sparkopsFleet.connected")
    sockets._marked_at = float("-inf")  # the page's socket is there: say so as its server did
    sockets.mark()
    watch = FleetWatch()
    watch.tick().result(5)  # everything, once: the page already shows it
    wait_for_js(page, "window.sparkopsFleet.applied === 1")
    before = _tiles(page)

    engine = Engine.objects.get(name="box-12-llama")
    Engine.objects.filter(pk=engine.pk).update(status="down", status_reason="connection refused")
    watch.tick().result(5)
    wait_for_js(page, "window.sparkopsFleet.applied === 2")
    after = _tiles(page)
    moved = {t[0]: t[4] for t in after}
    assert moved["box-12"] == ["down", "up", "up"]
    names = [t[0] for t in after if t[0] != "box-08"]  # box-08 may age from stale to unreachable meanwhile
    assert names[:4] == ["box-03", "box-17", "box-12", "box-30"]  # moved up among the problems
    # Nothing else changed (but box-08, whose report was seeded 14 s old: stale, and unreachable past 16 s,
    # its engines then unknown, which a slow run reaches between the two ticks).
    assert {t[0]: t[4] for t in before if t[0] != "box-08"} | {"box-12": ["down", "up", "up"]} == {
        name: chips for name, chips in moved.items() if name != "box-08"
    }
    chip = page.locator(f"#chip-{engine.pk}")
    assert chip.get_attribute("class") == "chip eng-down"
    assert "connection refused" in chip.get_attribute("title")
    summary = page.locator("#fleet-summary").inner_text()
    # The summary counts what the tiles show (box-08's engines may be unknown by now): one more down.
    ups, downs = (sum(chips.count(state) for *_, chips in after) for state in ("up", "down"))
    assert downs == sum(chips.count("down") for *_, chips in before) + 1
    assert f"{downs} down" in summary and f"{ups} up" in summary, summary
    assert page.evaluate("window.sparkopsFleet.fetches") == 0  # applied in place, no grid fetched

    # A box that comes is not a delta the page can place: it fetches the grid, server-rendered, once.
    Host.objects.create(name="box-51", last_report_at=timezone.now(), latest={"clock_offset_s": 0.0})
    watch.tick().result(5)
    wait_for_js(page, "window.sparkopsFleet.fetches === 1 && document.querySelectorAll('.tile').length === 51")
    assert "51 boxes" in page.locator("#fleet-summary").inner_text()
    assert seeded["hosts"] and errors == []
