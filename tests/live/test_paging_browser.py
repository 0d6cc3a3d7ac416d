"""Issue 30 §5, paging with nothing set up, in real headless Chromium against uvicorn (HTTP and
WebSocket) and the test database: an alert that starts firing raises a browser notification
with its title and puts the firing count in the tab title; both clear when it resolves.
Permission is asked only from the button; the tone is off until switched on, and remembered.

Chromium's notifications are granted through the browser context; an init script wraps
window.Notification so the test sees each one (headless Chromium shows none)."""

import pytest

from sparkops.alerts import outbox
from sparkops.alerts.inbox import DEMO_CHANNEL, demo_inbox_channel
from sparkops.alerts.models import Delivery, InboxMessage
from sparkops.alerts.services import external_alert_fire, external_alert_resolve
from tests.chromium import skip_without_chromium

from .stack import ROOT
from .test_browser import wait_for_js

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SHOTS = ROOT / "artifacts" / "screenshots"

FULL_BROWSER = True  # the Notification API as a browser has it (tests/chromium.py)
skip_without_chromium(full=FULL_BROWSER)

# Records every notification and permission request; the page keeps the real permission state.
CAPTURE = """
(() => {
  const Real = window.Notification;
  window.__notes = []; window.__asked = 0;
  class Captured {
    constructor(title, options) {
      this.title = title; this.options = options || {}; this.closed = false; window.__notes.push(this);
    }
    close() { this.closed = true; }
    static get permission() { return Real.permission; }
    static requestPermission(cb) { window.__asked++; return Real.requestPermission(cb); }
  }
  window.Notification = Captured;
})();
"""


@pytest.fixture
def web(shared_web):
    """The test process's web server (tests/conftest.py), its base URL: a page's socket is all these
    tests need of it, and starting one per test cost 2-3 s of a core each."""
    return shared_web[1]


def _page(chromium, base, user, *, grant=True, viewport=(1280, 800)):
    context = chromium.new_context(viewport={"width": viewport[0], "height": viewport[1]})
    if grant:
        context.grant_permissions(["notifications"], origin=base)
    context.add_init_script(CAPTURE)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(base + "/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", f"{user.username}-password-123")
    page.click("button[type=submit]")
    page.wait_for_url(base + "/")
    return page, errors


def _ready(page):
    """paging.js has its firing list and a socket (live.js's on the overview, its own elsewhere)."""
    wait_for_js(page, "window.sparkopsPaging && window.sparkopsPaging.loaded")
    wait_for_js(
        page,
        "(window.sparkopsLive && window.sparkopsLive.connected) || "
        "(window.sparkopsPaging.socket && window.sparkopsPaging.socket.readyState === 1)",
    )


@pytest.mark.parametrize("path", ["/", "/alerts/inbox/"])  # live.js's socket, and paging.js's own
def test_a_firing_alert_raises_a_notification_and_counts_in_the_title_until_resolved(
    chromium, web, fleet, operator, path
):
    page, errors = _page(chromium, web, operator)
    page.goto(web + path)
    _ready(page)
    base_title = page.title()
    assert not base_title.startswith("(")
    assert page.evaluate("window.__notes.length") == 0 and page.evaluate("window.__asked") == 0
    assert page.locator("#paging-enable").is_hidden()  # granted already: nothing to ask

    external_alert_fire(
        rule="engine_down", severity="critical", engine=fleet["vllm"], subject="vllm-main", message="vllm-main is down"
    )
    wait_for_js(page, "window.__notes.length === 1")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"paging-desk{path.replace('/', '-').rstrip('-')}.png"))
    note = page.evaluate("({title: __notes[0].title, body: __notes[0].options.body, tag: __notes[0].options.tag})")
    assert note["title"] == "engine_down on vllm-main" and note["body"] == "vllm-main is down"
    wait_for_js(page, "document.title.startsWith('(1) ')")
    assert page.title() == "(1) " + base_title

    external_alert_fire(
        rule="engine_down", severity="critical", engine=fleet["llama"], subject="llama-side", message="llama-side down"
    )
    wait_for_js(page, "document.title.startsWith('(2) ')")
    assert page.evaluate("__notes.map(n => n.title)") == ["engine_down on vllm-main", "engine_down on llama-side"]

    external_alert_resolve(rule="engine_down", engine=fleet["vllm"], subject="vllm-main")
    wait_for_js(page, "document.title.startsWith('(1) ')")
    assert page.evaluate("__notes[0].closed") is True and page.evaluate("__notes[1].closed") is False
    external_alert_resolve(rule="engine_down", engine=fleet["llama"], subject="llama-side")
    wait_for_js(page, f"document.title === {base_title!r}")
    assert page.evaluate("__notes.length") == 2 and not errors


def test_alerts_already_firing_count_but_do_not_page_again(chromium, web, fleet, viewer):
    external_alert_fire(
        rule="engine_down", severity="critical", engine=fleet["vllm"], subject="vllm-main", message="vllm-main is down"
    )
    page, _ = _page(chromium, web, viewer)
    _ready(page)
    assert page.title().startswith("(1) ")
    assert page.evaluate("__notes.length") == 0  # it was firing before the page opened


@pytest.mark.parametrize("viewport", [(1280, 800), (390, 844)], ids=["desk", "phone"])
def test_permission_is_asked_from_the_button_never_on_load(chromium, web, fleet, viewer, viewport):
    page, errors = _page(chromium, web, viewer, grant=False, viewport=viewport)
    _ready(page)
    button = page.locator("#paging-enable")
    assert button.is_visible() and button.inner_text() == "Enable notifications"
    assert page.evaluate("window.__asked") == 0
    assert page.evaluate("document.documentElement.scrollWidth") <= viewport[0]  # the top bar still fits
    box = button.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= viewport[0]
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"paging-ask-{viewport[0]}.png"))
    button.click()
    wait_for_js(page, "window.__asked === 1")
    assert not errors


def test_the_tone_is_off_until_switched_on_and_remembered(chromium, web, fleet, operator):
    page, errors = _page(chromium, web, operator, viewport=(390, 844))
    _ready(page)
    sound = page.locator("#paging-sound")
    assert sound.get_attribute("aria-pressed") == "false"
    assert page.evaluate("localStorage.getItem('sparkops.sound')") is None
    sound.click()  # on, with a preview tone
    assert sound.get_attribute("aria-pressed") == "true" and page.evaluate("sparkopsPaging.tones") == 1
    assert page.evaluate("localStorage.getItem('sparkops.sound')") == "on"
    page.reload()
    _ready(page)
    assert page.locator("#paging-sound").get_attribute("aria-pressed") == "true"
    assert page.evaluate("sparkopsPaging.tones") == 0
    external_alert_fire(
        rule="engine_down", severity="critical", engine=fleet["vllm"], subject="vllm-main", message="vllm-main is down"
    )
    wait_for_js(page, "sparkopsPaging.tones === 1")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "paging-phone.png"), full_page=True)
    page.locator("#paging-sound").click()
    assert page.evaluate("localStorage.getItem('sparkops.sound')") == "off"
    assert not errors


@pytest.mark.parametrize("viewport", [(1280, 800), (390, 844)], ids=["desk", "phone"])
def test_the_inbox_page_shows_a_delivery_as_it_arrives(chromium, web, fleet, viewer, viewport):
    """The demo's channel: what the outbox sends to SparkOps's own receiver appears without a reload."""
    channel, _ = demo_inbox_channel(base_url=web)
    page, errors = _page(chromium, web, viewer, viewport=viewport)
    page.goto(web + "/alerts/inbox/")
    _ready(page)
    assert page.locator("#inbox-empty").is_visible()
    assert DEMO_CHANNEL in page.locator("#inbox-channels").inner_text()
    external_alert_fire(
        rule="engine_down", severity="critical", engine=fleet["vllm"], subject="vllm-main", message="vllm-main is down"
    )
    for pk in Delivery.objects.filter(channel=channel, status="pending").values_list("pk", flat=True):
        assert outbox.delivery_send(delivery_id=pk) == "sent"  # what the worker does, to uvicorn's receiver
    message = InboxMessage.objects.get()
    article = page.locator(f"#inbox-{message.pk}")
    article.wait_for(timeout=10000)
    assert "engine_down on vllm-main" in article.inner_text() and "firing" in article.inner_text().lower()
    assert page.evaluate("document.documentElement.scrollWidth") <= viewport[0]  # nothing wider than the screen
    name = "desk" if viewport[0] > 400 else "phone"
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"inbox-{name}.png"), full_page=True)
    assert not errors
