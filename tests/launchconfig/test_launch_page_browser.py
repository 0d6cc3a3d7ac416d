"""Issue 30 §1 in real headless Chromium, against a real web server: from an engine's card on the
overview, follow the link to its launch configuration page and read a flag with the drop-in that set
it, an environment whose secret is nowhere on the page, and the difference a restart with an edited
drop-in made; at a desk (1280×800) and on a phone (390×844) nothing scrolls sideways but the tables
inside their box, and no word is broken letter by letter. The snapshots are the real observer's, of
the simulator's unit files (`systemctl show`/`cat` of sim-systemctl). Screenshots:
artifacts/screenshots/launch-config-{desk,phone}.png."""

import pytest

from tests.live.test_browser import SHOTS, Session, browser  # noqa: F401 — fixtures
from tests.live.test_phone_browser import web  # noqa: F401 — fixture: the web server alone

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HF_TOKEN = "hf_browser_0123456789SECRETVALUE"
SECRETS_DROPIN = f"[Service]\nEnvironment=HF_TOKEN={HF_TOKEN}\n"
SEQS_64 = '# fewer sequences, more KV per sequence\n[Service]\nEnvironment="VLLM_EXTRA_ARGS=--max-num-seqs 64"\n'
DROP = "/etc/systemd/system/nemotron.service.d/"

# Each table cell against the longest word it holds (measured in the cell's own font): a cell
# narrower than its longest word breaks that word (the "NA ME", "dem o-llam a" of issue 30 §3). A
# path counts piece by piece ("/etc", "/systemd", …): the page lets it break before a "/".
NARROW_CELLS = """() => {
  const ctx = document.createElement('canvas').getContext('2d');
  const out = [];
  for (const cell of document.querySelectorAll('#launch-config td, #launch-config th')) {
    if (!cell.getClientRects().length) continue;  // not shown (a stacked table's header)
    const cs = getComputedStyle(cell);
    ctx.font = cs.font;
    const box = cs.display === 'inline' ? cell.parentElement : cell;  // a stacked row's name and value run inline
    const bs = getComputedStyle(box);
    const inner = box.clientWidth - parseFloat(bs.paddingLeft) - parseFloat(bs.paddingRight);
    // words, and a path's pieces: the page allows a break before each "/" of a path
    for (const word of cell.innerText.split(/\\s+/).flatMap(w => w.split(/(?=\\/)/))) {
      if (word && ctx.measureText(word).width > inner + 1) { out.push(word + ' in ' + Math.round(inner) + 'px'); break; }
    }
  }
  return out;
}"""
# Elements of the page (the top bar is the base template's) reaching past the screen's right edge,
# but for what scrolls inside its box.
WIDER_THAN_PAGE = """() => [...document.querySelectorAll('#launch-config *')].filter(
  e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1 && !e.closest('.lc-scroll, pre')
).slice(0, 8).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))"""
# Boxes that hold a table: each scrolls inside itself, never wider than the page.
BOXES_FIT = """() => [...document.querySelectorAll('#launch-config .lc-scroll')].every(
  b => b.getBoundingClientRect().right <= document.documentElement.clientWidth + 1)"""


def _observe(engine):
    """The observer in a thread of its own: Playwright's sync API holds an event loop in this one, and
    the engine's account is read with asyncio.run."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    from sparkops.launch.observer import Observer

    def run():
        try:
            return Observer().observe([engine])
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


def test_from_the_card_to_the_launch_configuration_with_its_origin_secret_and_diff(
    box_engines,
    sim_box,
    web,
    browser,
    viewer,
):
    from dashboard.models import ConfigSnapshot

    nemotron = box_engines["nemotron"]
    sim_box.dropin("nemotron", "30-secrets.conf", SECRETS_DROPIN)
    sim_box.restart("nemotron")
    sim_box.wait_ready("nemotron")
    _observe(nemotron)
    sim_box.dropin("nemotron", "20-seqs.conf", SEQS_64)
    sim_box.restart("nemotron")
    sim_box.wait_ready("nemotron")
    _observe(nemotron)
    assert ConfigSnapshot.objects.filter(engine=nemotron).count() == 2

    s = Session(browser, web.base, viewer)
    page = s.page
    page.locator(f"#engine-card-{nemotron.id} a.launch-link").click()  # the card on the overview
    page.wait_for_url(f"{web.base}/engines/nemotron/launch/")
    row = page.locator('#flags tr[data-flag="--max-num-seqs"]')
    text = row.inner_text()
    assert "64" in text and DROP + "20-seqs.conf" in text and "drop-in 2 of 3" in text
    env = page.locator('#environment tr[data-env="HF_TOKEN"]').inner_text()
    assert "redacted" in env and DROP + "30-secrets.conf" in env
    assert HF_TOKEN not in page.content()
    assert "HF_TOKEN=redacted" in page.locator(f'#unit-files details[data-path="{DROP}30-secrets.conf"]').inner_text()
    newest = page.locator("#history li.lc-version").first
    diff = newest.locator(".lc-diff").inner_text()
    assert "--max-num-seqs: 128 → 64" in diff and "20-seqs.conf" in diff
    assert "change-log entry" in newest.inner_text()
    for size, (width, height) in {"desk": (1280, 800), "phone": (390, 844)}.items():
        page.set_viewport_size({"width": width, "height": height})
        page.reload()
        page.locator("#history").wait_for()
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"launch-config-{size}.png"), full_page=True)
        assert page.evaluate(WIDER_THAN_PAGE) == [], f"the page's content is wider than the screen ({size})"
        assert page.evaluate(BOXES_FIT), f"a table's box is wider than the page ({size})"
        assert page.evaluate(NARROW_CELLS) == [], f"words broken inside cells ({size})"
    assert not s.errors, s.errors
