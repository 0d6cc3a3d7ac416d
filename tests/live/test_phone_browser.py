"""Issue 19 in real headless Chromium, at a desk (1280×800) and on a phone (390×844): a fresh start
is quiet, a down card carries its fix, silenced and acknowledged alerts are marked, bad input is refused
at the field, the time range lives in the URL and no page scrolls sideways (nor breaks the
Content-Security-Policy, checked in the same visits). Screenshots go to artifacts/screenshots/
(NAME-desk.png, NAME-phone.png) when asked for (SPARKOPS_SCREENSHOTS=1)."""

import time

import pytest

from tests.test_csp_browser import everything  # noqa: F401 — fixture: one of each thing the pages show
from tests.waiting import wait_for

from .test_browser import SHOTS, Session, _live, browser, stack, wait_for_js  # noqa: F401 — fixtures

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SIZES = {"desk": (1280, 800), "phone": (390, 844)}


class SizedSession(Session):
    def __init__(self, browser, base, user, size, *, init_script=None):
        super().__init__(browser, base, user, init_script=init_script, viewport=SIZES[size])
        self.size = size

    def shot(self, name):
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name}-{self.size}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def web(shared_web):
    """Only the web server (no simulator, no poller): for pages whose rows the test writes itself."""
    from types import SimpleNamespace

    proc, base, _log = shared_web
    return SimpleNamespace(base=base, proc=proc)


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


def _start_worker(tmp_path, host_name, *, unit_actions):
    """A real `sparkops worker` for HOST_NAME's queue (no poller: the test's own polls), with the
    test systemctl that restarts through the simulator's control API."""
    import json
    import os
    import subprocess
    import sys

    from django.db import connection

    from .stack import ROOT

    ports = tmp_path / "engines.json"
    control = json.loads(ports.read_text().splitlines()[0])["control"] if ports.exists() else ""
    name = connection.settings_dict["NAME"]
    url = f"sqlite:///{name}" if connection.vendor == "sqlite" else f"postgres://postgres@127.0.0.1:5432/{name}"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "sparkops.settings",
        "SPARKOPS_UNIT_ACTIONS": "1" if unit_actions else "0",
        "SPARKOPS_SIM_CONTROL": control,
        "SPARKOPS_SYSTEMCTL": str(ROOT / "tests" / "live" / "bin" / "unit-systemctl"),
        "UNIT_ACTIONS_LOG": str(tmp_path / "unit-actions.log"),
    }
    env.pop("SPARKOPS_TEST_DB_NAME", None)
    log = open(tmp_path / "worker.log", "w")  # noqa: SIM115 (the child's log: open while it runs)
    return subprocess.Popen(
        [sys.executable, "-m", "sparkops.cli", "worker", "--host", host_name, "--no-poller", "--concurrency", "1"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )


@pytest.mark.parametrize("size", SIZES)
def test_a_down_card_carries_its_fix_and_an_admin_restarts_it_through_the_boxs_worker(
    stack, browser, viewer, admin_user, tmp_path, size
):
    import httpx

    from dashboard.models import Host
    from sparkops.alerts.models import AlertEvent, AlertNote
    from sparkops.changelog.models import Entry

    from .stack import stop

    worker = _start_worker(tmp_path, stack.host.name, unit_actions=True)
    try:
        deadline = time.monotonic() + 30
        while not Host.objects.get(pk=stack.host.pk).unit_actions:
            assert worker.poll() is None and time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-3000:]
            time.sleep(0.2)
        vllm = stack.engines["sim-vllm"]
        admin = SizedSession(browser, stack.base, admin_user, size)
        admin.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=stack.base)
        page = admin.page
        _live(page)
        card = page.locator(f"#engine-card-{vllm.id}")
        card.and_(page.locator(".status-up")).wait_for(timeout=15000)
        assert card.locator("[data-field=fix]").count() == 0  # an up card carries no fix
        assert httpx.post(vllm.url.rstrip("/") + "/_sim/fault", json={"kind": "exit0"}, timeout=5).status_code == 200
        card.and_(page.locator(".status-down")).wait_for(timeout=10000)
        fix = card.locator("[data-field=fix]")
        fix.wait_for(timeout=10000)
        button = card.locator("form.unit-restart button[type=submit]")
        button.wait_for(state="visible", timeout=15000)  # the box's worker allows it: shown to an admin
        text = fix.inner_text()
        for command in (
            "sudo systemctl restart sim-vllm.service",
            "sudo systemctl reset-failed sim-vllm.service",
            "Restart=always",
            "daemon-reload",
        ):
            assert command in text, text
        fix.locator("button[data-copy]").first.click()
        wait_for_js(page, "!!document.querySelector('button[data-copy][data-copied]')")
        assert page.evaluate("navigator.clipboard.readText()") == "sudo systemctl restart sim-vllm.service"
        right = page.evaluate(f"document.getElementById('engine-card-{vllm.id}').getBoundingClientRect().right")
        assert right <= SIZES[size][0], f"the card ends at {right} px"
        # The live view re-renders the card on every update: scroll to whichever node is there now
        # (a locator's scroll holds one node and fails when the next update replaces it).
        page.evaluate(f"document.querySelector('#engine-card-{vllm.id} [data-field=fix]').scrollIntoView()")
        admin.shot("overview-down-fix")

        viewer_session = SizedSession(browser, stack.base, viewer, size)
        viewer_card = viewer_session.page.locator(f"#engine-card-{vllm.id}")
        viewer_card.locator("[data-field=fix]").wait_for(timeout=10000)
        assert not viewer_card.locator("form.unit-restart").is_visible(), "a viewer sees the Restart button"

        page.once("dialog", lambda d: d.dismiss())  # a slip of the thumb: nothing happens
        button.click()
        page.wait_for_timeout(300)
        assert not AlertNote.objects.filter(kind="unit_action").exists()
        page.once("dialog", lambda d: d.accept())
        button.click()
        page.locator(".messages", has_text="Restart of sim-vllm.service sent").wait_for(timeout=10000)
        event = AlertEvent.objects.filter(engine=vllm, rule="engine_down").latest("started_at")
        deadline = time.monotonic() + 30
        while not AlertNote.objects.filter(event=event, kind="unit_action", text__endswith=": done").exists():
            assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-3000:]
            time.sleep(0.2)
        page.locator(f"#engine-card-{vllm.id}.status-up").wait_for(timeout=20000)
        notes = list(AlertNote.objects.filter(event=event, kind="unit_action").values_list("text", flat=True))
        assert notes[0].startswith("Restart of sim-vllm.service requested by ada")
        assert notes[1] == "systemctl restart sim-vllm.service on spark-sim: done"
        assert set(Entry.objects.filter(kind="incident_note").values_list("title", flat=True)) == set(notes)
        assert (tmp_path / "unit-actions.log").read_text().splitlines() == [
            '["reset-failed", "sim-vllm.service"]',
            '["restart", "sim-vllm.service"]',
        ]
        page.goto(f"{stack.base}/alerts/{event.pk}/")
        page.get_by_text("systemctl restart sim-vllm.service on spark-sim: done").first.wait_for(timeout=5000)
        admin.shot("alert-restart-timeline")
        assert not admin.errors and not viewer_session.errors, admin.errors + viewer_session.errors
    finally:
        stop(worker)


@pytest.mark.parametrize("size", SIZES)
def test_silenced_and_acknowledged_alerts_are_marked_on_the_overview(web, fleet, browser, operator, size):
    from sparkops.alerts.services import external_alert_fire

    down = external_alert_fire(
        rule="engine_down",
        severity="critical",
        engine=fleet["llama"],
        subject="llama-side",
        message="llama-side exited with status 0",
        cause="exit0_no_restart",
    )
    kv = external_alert_fire(
        rule="kv_saturated", severity="warning", engine=fleet["vllm"], subject="vllm-main", message="KV cache 99 % full"
    )
    ops = SizedSession(browser, web.base, operator, size)
    page = ops.page
    _live(page)
    row = page.locator(f"#alert-{down.pk}")
    row.wait_for(timeout=10000)
    assert row.locator(".mark").count() == 0, "a fresh alert carries no mark"
    row.locator("button", has_text="Ack").click()
    page.locator(f"#alert-{down.pk} [data-field=acked]").wait_for(timeout=10000)
    assert page.locator(f"#alert-{down.pk} [data-field=acked]").inner_text().startswith("acknowledged by otto at ")
    other = page.locator(f"#alert-{kv.pk}")
    other.locator("input.hours").fill("1.5")
    other.locator("button", has_text="Silence").click()
    mark = page.locator(f"#alert-{kv.pk} [data-field=silenced]")
    mark.wait_for(timeout=10000)
    from sparkops.alerts.models import Silence

    until = Silence.objects.get().until
    kv.refresh_from_db()
    # The day is named when the silence ends on another day than the alert fired (past midnight UTC).
    day = f" on {until:%b} {until.day}" if until.date() != kv.fired_at.date() else ""
    assert mark.inner_text() == f"silenced until {until:%H:%M}{day} UTC by otto", mark.inner_text()
    assert page.locator(f"#alert-{down.pk} [data-field=silenced]").count() == 0  # the silence covers only its rule
    # Thumb-sized: the row's buttons are at least 40 px tall on the phone
    if size == "phone":
        heights = page.evaluate(
            "Array.from(document.querySelectorAll('#firing-alerts button')).map(b => b.getBoundingClientRect().height)"
        )
        assert heights and min(heights) >= 40, heights
    # The critical stays on top though acknowledged.
    ids = page.evaluate(
        "Array.from(document.querySelectorAll('#firing-alerts .alert-row')).map(r => r.dataset.alertId)"
    )
    assert ids == [str(down.pk), str(kv.pk)]
    ops.shot("overview-marks")
    assert not ops.errors, ops.errors


@pytest.mark.parametrize("size", SIZES)
def test_last_error_is_a_sentence_cleared_on_recovery_and_kept_on_the_engine_page(
    stack, browser, operator, tmp_path, size
):
    import json
    import re

    import httpx

    vllm = stack.engines["sim-vllm"]
    control = json.loads((tmp_path / "engines.json").read_text().splitlines()[0])["control"]
    ops = SizedSession(browser, stack.base, operator, size)
    page = ops.page
    _live(page)
    card = page.locator(f"#engine-card-{vllm.id}")
    card.and_(page.locator(".status-up")).wait_for(timeout=15000)
    assert card.locator("[data-field=last-error]").inner_text().strip() == "—"
    assert httpx.post(vllm.url.rstrip("/") + "/_sim/fault", json={"kind": "exit0"}, timeout=5).status_code == 200
    card.and_(page.locator(".status-down")).wait_for(timeout=10000)
    wait_for_js(
        page, f"document.querySelector('#engine-card-{vllm.id} [data-field=last-error]').textContent.trim() !== '—'"
    )
    sentence = card.locator("[data-field=last-error]").inner_text().strip()
    assert re.match(r"^At \d\d:\d\d:\d\d UTC .+\.$", sentence), sentence
    assert "{" not in sentence and "time_us" not in sentence, sentence
    ops.shot("overview-last-error")
    # The card turns down on the first failed probe; engine_down fires on the second (its recheck), and the
    # engine page lists fired alerts only: restarted before it fires (a loaded box), the page has none to list.
    from sparkops.alerts.models import AlertEvent

    fired = AlertEvent.objects.filter(engine=vllm, rule="engine_down").exclude(state="pending")
    assert wait_for(fired.exists, timeout=20), "engine_down never fired for the dead engine"
    assert httpx.post(f"{control}/_sim/units/sim-vllm/restart", json={}, timeout=30).status_code == 200
    card.and_(page.locator(".status-up")).wait_for(timeout=20000)
    wait_for_js(
        page, f"document.querySelector('#engine-card-{vllm.id} [data-field=last-error]').textContent.trim() === '—'"
    )
    page.goto(f"{stack.base}/engines/{vllm.name}/")
    history = page.locator("#error-history")
    history.get_by_text("engine_down").first.wait_for(timeout=5000)
    assert page.locator(f"#engine-card-{vllm.id} [data-field=last-error]").inner_text().strip() == "—"
    ops.shot("engine-detail-error-history")
    assert not ops.errors, ops.errors


OVERFLOWING = """() => Array.from(document.querySelectorAll('body *')).filter(e => {
    const r = e.getBoundingClientRect(); return r.width > 0 && r.right > window.innerWidth + 1
      && getComputedStyle(e).position !== 'fixed' && !e.closest('.offscreen');
  }).slice(0, 8).map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className && e.className.baseVal === undefined
      ? '.' + String(e.className).split(' ').join('.') : '') + ' ' + Math.round(e.getBoundingClientRect().right))"""


SETTLED = (
    "() => document.fonts.ready.then(() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r))))"
)


def _settled(page):
    """The page's fonts loaded and two frames laid out since: what the eye (and the width check) sees."""
    page.wait_for_load_state("load")
    page.evaluate(SETTLED)


def _no_sideways_scroll(page):
    """True when the page fits its viewport's width; else the first elements that stick out (for the message)."""
    if page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"):
        return True
    print("sticking out on", page.url, page.evaluate(OVERFLOWING))
    return False


@pytest.mark.parametrize("size", SIZES)
def test_absurd_input_is_refused_at_the_field_and_long_text_wraps(web, fleet, browser, operator, size):
    from sparkops.benchmarks.models import Profile
    from sparkops.changelog.models import Entry

    ops = SizedSession(browser, web.base, operator, size)
    page = ops.page
    page.goto(f"{web.base}/bench/profiles/new/")
    page.fill("#id_name", "decode-1k")
    page.select_option("#id_engine", str(fleet["vllm"].pk))
    page.fill("#id_output_tokens", "99999999999")
    page.fill("#id_timeout_s", "0")
    # The browser refuses first (the fields carry the model's bounds) ...
    page.click("form.card button[type=submit]")
    assert page.evaluate("document.getElementById('id_output_tokens').validity.rangeOverflow")
    assert page.evaluate("document.getElementById('id_timeout_s').validity.rangeUnderflow")
    assert not Profile.objects.exists() and page.url.endswith("/bench/profiles/new/")
    # ... and the server too, should anything skip the browser's check: errors at the fields, input kept.
    page.evaluate("document.querySelector('form.card').noValidate = true")
    page.click("form.card button[type=submit]")
    page.wait_for_load_state()
    page.locator(".errorlist").first.wait_for(timeout=5000)
    assert not Profile.objects.exists()
    rows = page.locator("form.card tr", has=page.locator("#id_output_tokens"))
    assert "less than or equal to 131072" in rows.inner_text()
    assert "greater than or equal to 1" in page.locator("form.card tr", has=page.locator("#id_timeout_s")).inner_text()
    assert page.input_value("#id_output_tokens") == "99999999999" and page.input_value("#id_name") == "decode-1k"
    ops.shot("bench-profile-refused")
    assert _no_sideways_scroll(page), "the profile form scrolls sideways"

    entry = Entry.objects.create(effective_at=timezone_now(), kind="flag_change", title="--max-num-seqs " + "x" * 180)
    entry.engines.add(fleet["vllm"])
    page.goto(f"{web.base}/changelog/")
    page.get_by_text("--max-num-seqs").first.wait_for(timeout=5000)
    ops.shot("changelog-long-title")
    assert _no_sideways_scroll(page), "a long title widens the change log"
    assert not ops.errors, ops.errors


def timezone_now():
    from django.utils import timezone

    return timezone.now()


@pytest.mark.parametrize("size", SIZES)
def test_the_time_range_lives_in_the_url_and_survives_a_reload(web, fleet, browser, viewer, size):
    from datetime import timedelta

    from django.utils import timezone

    from .helpers import add_minute_rollups, add_samples

    vllm, now = fleet["vllm"], timezone.now()
    add_samples(metric="generation_tokens_per_s", values=[60.0] * 300, end=now, engine=vllm)
    add_minute_rollups(
        metric="generation_tokens_per_s", start=now - timedelta(hours=30), minutes=30 * 60 - 5, value=60.0, engine=vllm
    )  # a box watched for 30 hours
    session = SizedSession(browser, web.base, viewer, size)
    page = session.page
    base = f"{web.base}/engines/{vllm.name}/"
    page.goto(base)
    wait_for_js(page, "window.sparkopsLive.chartData && window.sparkopsLive.chartData.range.key === '1h'")
    page.click("button[data-range='7d']")
    wait_for_js(page, "window.sparkopsLive.chartData.range.key === '7d'")
    assert page.url == base + "?range=7d"
    page.reload()
    wait_for_js(
        page, "window.sparkopsLive && window.sparkopsLive.chartData && window.sparkopsLive.chartData.range.key === '7d'"
    )
    assert page.locator(".range-bar button.active").inner_text() == "7d"
    # Seven days asked, thirty hours held: the axis starts where the data starts.
    x0 = page.evaluate("Date.parse(document.getElementById('chart-tokens').layout.xaxis.range[0])")
    assert abs(x0 / 1000 - (now - timedelta(hours=30)).timestamp()) < 3600, "the 7-day axis starts days before the data"
    session.shot("engine-detail-7d")
    # A custom span is kept as well, and Back returns to the 7-day view.
    page.fill(
        "[data-custom-range] input[name=start]",
        (timezone.localtime(now) - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M"),
    )
    page.click("[data-custom-range] button[type=submit]")
    wait_for_js(page, "window.sparkopsLive.chartData.range.key === 'custom'")
    assert "start=" in page.url and "range=" not in page.url
    page.reload()
    wait_for_js(
        page,
        "window.sparkopsLive && window.sparkopsLive.chartData && window.sparkopsLive.chartData.range.key === 'custom'",
    )
    assert page.locator(".range-bar button.active").count() == 0
    assert page.input_value("[data-custom-range] input[name=start]")
    page.go_back()
    wait_for_js(page, "window.sparkopsLive.chartData.range.key === '7d'")
    assert _no_sideways_scroll(page), "the engine page scrolls sideways"
    assert not session.errors, session.errors


def _shot_name(path):
    import re

    name = re.sub(r"[^a-z0-9]+", "-", path.strip("/").lower()).strip("-")
    return "page-" + (name or "overview")


def test_every_page_fits_a_phone_and_each_is_photographed_at_both_sizes(everything, web, browser, admin_user):
    """No page scrolls sideways at 390×844; every page is photographed at 1280×800 and 390×844. In the same
    visits, every main page (and at the desk the admin's) carries the Content-Security-Policy and runs with no
    console error, no page error and no violation of it (test_csp_browser.py's checks)."""
    from tests.test_csp_browser import RECORD_VIOLATIONS, _check_header

    fleet, runs = everything["fleet"], everything["runs"]
    vllm, llama, host = fleet["vllm"], fleet["llama"], fleet["host"]
    from dashboard.models import Incident

    incident = Incident.objects.get()
    pages = [
        "/",
        "/engines/",
        f"/engines/{vllm.name}/",
        f"/engines/{llama.name}/",
        f"/hosts/{host.name}/",
        f"/coresidency/?a={vllm.name}&b={llama.name}",
        f"/hosts/{host.name}/audit/",
        f"/engines/{vllm.name}/audit/",
        "/alerts/",
        f"/alerts/{everything['alert'].pk}/",
        "/alerts/channels/",
        "/alerts/silences/",
        "/alerts/rules/",
        "/changelog/",
        f"/changelog/{everything['entry'].pk}/",
        "/changelog/new/",
        "/changelog/claims/",
        "/changelog/import/",
        "/changelog/ledgers/",
        f"/changelog/ledgers/incidents/{incident.pk}/close/",
        "/bench/",
        f"/bench/profiles/{everything['profile'].pk}/",
        "/bench/profiles/new/",
        f"/bench/profiles/{everything['profile'].pk}/edit/",
        f"/bench/runs/{runs[0].pk}/",
        f"/bench/compare/?a={runs[0].pk}&b={runs[1].pk}",
    ]
    policy_only = [  # at the desk, for the policy: the admin's pages and the co-residency page with no pair chosen
        "/coresidency/",
        "/admin/",
        "/admin/axes/accessattempt/",
        "/admin/axes/accessfailurelog/",
        f"/admin/dashboard/engine/{vllm.pk}/change/",
        "/admin/auth/user/add/",
    ]
    wide, violations = [], []
    for size in SIZES:
        session = SizedSession(browser, web.base, admin_user, size, init_script=RECORD_VIOLATIONS)
        page = session.page
        for path in pages + (policy_only if size == "desk" else []):
            response = page.goto(web.base + path)
            assert response.status == 200, (path, response.status)
            _check_header(response, web.base)
            if page.locator("[data-chart], .chart, #charts, .chart-panel").count():
                page.wait_for_selector(".main-svg", timeout=15000)
            if path == "/" and size == "desk":
                # The live view's socket opens under the policy (connect-src names ws:// of this host).
                wait_for_js(page, "window.sparkopsLive && window.sparkopsLive.connected")
                # The bars are drawn from classes (no style="" attribute, which the policy would refuse).
                assert page.locator(f"#engine-card-{vllm.pk} .bar i.w37").count() == 1
                share = page.evaluate(
                    "(() => { const i = document.querySelector('.bar i.w37');"
                    " return i.getBoundingClientRect().width / i.parentElement.clientWidth; })()"
                )
                assert abs(share - 0.37) < 0.02, share
            _settled(page)
            if size == "desk":
                page.wait_for_timeout(300)  # the page's scripts run (sockets open) before what they did is read
            recorded = page.evaluate("window.__csp")
            assert isinstance(recorded, list), f"{path}: the violation recorder did not run"
            violations += [f"{size} {path}: {v}" for v in recorded]
            if path in policy_only:
                continue
            session.shot(_shot_name(path))
            if path == "/alerts/rules/":
                print(f"rules page at {size}: {page.evaluate('document.documentElement.scrollHeight')} px tall")
            if not _no_sideways_scroll(page):
                wide.append(f"{size} {path}: {page.evaluate(OVERFLOWING)}")
        assert not session.errors, session.errors
        session.context.close()
    assert violations == [], "\n".join(violations)
    login = browser.new_context(viewport={"width": 390, "height": 844}).new_page()
    login.goto(web.base + "/login/")
    # The home-screen manifest and its icons load (from the page, as the phone's browser reads them).
    icons = login.evaluate("""async () => {
        const m = await (await fetch(document.querySelector('link[rel=manifest]').href)).json();
        return Promise.all(m.icons.map(async i => [i.sizes, (await fetch(i.src)).status]));
      }""")
    assert dict(icons) == {"192x192": 200, "512x512": 200, "any": 200}, icons
    if not _no_sideways_scroll(login):
        wide.append(f"phone /login/: {login.evaluate(OVERFLOWING)}")
    login.screenshot(path=str(SHOTS / "page-login-phone.png"), full_page=True)
    assert wide == [], "\n".join(wide)


LIVE_CONTRACT = {  # the contract part of a reading, as sparkops/collectors/contract.py stores it
    "metrics": True,
    "window_s": 600.0,
    "span_s": 540.0,
    "finished": {"stop": 6, "length": 2, "abort": 3, "error": 0, "repetition": 0},
    "shares": {"stop": 0.55, "length": 0.18, "abort": 0.27, "error": 0.0, "repetition": 0.0},
    "edge": {"prompts": 11, "over": 8, "bound_tokens": 20000, "of_window": 0.61, "window_tokens": 32768},
    "e2e_cut": {"requests": 3, "at_s": 600.0, "seen_s": [600.0, 600.01]},
    "journal": {"http_400": 2, "http_500": 1, "peg_native": 1, "last": {}},
}


# The new pages (planner, probes, sweeps, rate runs, experiments, the audit thresholds, the contract panels)
# fit a phone: tests/live/test_tables.py measures them in its sweep, once per page and size.


@pytest.mark.parametrize("size", SIZES)
def test_charts_break_at_an_outage_read_in_units_and_keep_ratios_0_to_100(web, fleet, browser, viewer, size):
    from datetime import timedelta

    from django.utils import timezone

    from .helpers import add_samples

    vllm, host, now = fleet["vllm"], fleet["host"], timezone.now()
    add_samples(metric="generation_tokens_per_s", values=[60.0] * 60, end=now - timedelta(minutes=6), engine=vllm)
    add_samples(metric="generation_tokens_per_s", values=[62.0] * 60, end=now, engine=vllm)
    add_samples(metric="prompt_tokens_per_s", values=[4000.0] * 120, end=now, engine=vllm)
    add_samples(metric="kv_cache_usage", values=[0.004, 0.006, 0.012] * 40, end=now, engine=vllm)
    for metric in ("psi.memory.some.avg10", "psi.memory.full.avg10", "psi.cpu.some.avg10"):
        add_samples(metric=metric, values=[1.0] * 60, end=now, host=host)
    session = SizedSession(browser, web.base, viewer, size)
    page = session.page
    page.goto(f"{web.base}/engines/{vllm.name}/")
    page.wait_for_selector("#chart-tokens .main-svg", timeout=15000)
    decode = page.evaluate("document.getElementById('chart-tokens').data[0].y")
    assert None in decode, "the decode line runs straight across the outage"
    assert page.evaluate("document.getElementById('chart-tokens').data.length") == 1  # prompt has its own panel
    assert page.evaluate("document.getElementById('chart-kv').layout.yaxis.range") == [0, 1]
    ticks = page.evaluate("Array.from(document.querySelectorAll('#chart-kv .ytick text')).map(t => t.textContent)")
    assert len(ticks) == len(set(ticks)), ticks
    units = page.evaluate("Array.from(document.querySelectorAll('.chart-panel')).map(d => d.layout.yaxis.title.text)")
    assert units and all(units), units
    session.shot("engine-detail-charts")
    page.goto(f"{web.base}/hosts/{host.name}/")
    page.wait_for_selector("#chart-psi .main-svg", timeout=15000)
    legend = page.evaluate("document.getElementById('chart-psi').layout.legend")
    assert legend["y"] < 0, "the PSI legend sits over its title"
    assert _no_sideways_scroll(page)
    session.shot("host-detail-charts")
    assert not session.errors, session.errors


@pytest.mark.parametrize("size", SIZES)
def test_a_card_colours_the_value_its_alert_fires_on_and_smooths_decode(web, fleet, browser, viewer, size):
    import re

    from django.utils import timezone

    from sparkops.alerts.services import external_alert_fire

    from .helpers import add_samples

    vllm, now = fleet["vllm"], timezone.now()
    vllm.latest = {
        "up": True,
        "status": "up",
        "prefix_cache_hit_rate": 0.0,
        "kv_cache_usage": 0.4,
        "generation_tokens_per_s": 0.0,
        "requests_running": 1,
        "requests_waiting": 0,
    }
    vllm.save()
    external_alert_fire(
        rule="prefix_cache_drop",
        severity="warning",
        engine=vllm,
        subject="vllm-main",
        message="prefix-cache hit rate 0 % against a 92 % baseline",
    )
    add_samples(metric="generation_tokens_per_s", values=[0.0, 300.0] * 30, end=now, engine=vllm)  # flickers per poll
    session = SizedSession(browser, web.base, viewer, size)
    page = session.page
    _live(page)
    card = page.locator(f"#engine-card-{vllm.id}")
    prefix = card.locator("[data-field=prefix]")
    assert "alerting" in prefix.get_attribute("class") and prefix.inner_text().startswith("0 %")
    assert prefix.evaluate("e => getComputedStyle(e).color") != card.locator("[data-field=decode]").evaluate(
        "e => getComputedStyle(e).color"
    ), "the alerting value is drawn like any other"
    assert "alerting" not in (card.locator("[data-field=kv]").get_attribute("class") or "")
    wait_for_js(
        page, f"document.querySelector('#engine-card-{vllm.id} [data-field=decode]').textContent.includes('30 s avg')"
    )
    decode = card.locator("[data-field=decode]").inner_text()
    caption = card.locator("[data-field=spark-caption]").inner_text()
    number = re.search(r"([\d.]+) tok/s · 30 s avg", decode).group(1)
    assert 100 <= float(number) <= 200, decode  # the mean of 0 and 300, not either
    assert f"{number} (30 s avg)" in caption, (decode, caption)
    session.shot("overview-card-alerting")
    assert not session.errors, session.errors


@pytest.mark.parametrize("size", SIZES)
def test_an_admin_adds_a_webhook_channel_in_the_form_and_its_test_reaches_a_real_receiver(
    web, browser, admin_user, tmp_path, size
):
    import hashlib
    import hmac

    from sparkops.alerts.models import NotificationChannel
    from tests.alerts.servers import WebhookReceiver

    from .stack import stop

    receiver = WebhookReceiver()
    worker = _start_worker(tmp_path, "spark-web", unit_actions=False)  # delivers the outbox (queue celery)
    try:
        admin = SizedSession(browser, web.base, admin_user, size)
        page = admin.page
        page.goto(f"{web.base}/alerts/channels/")
        form = page.locator("[data-channel-form]")
        page.select_option("#id_kind", "webhook")
        assert not form.locator("[data-field-row=address]").is_visible()  # an email field has no place here
        assert form.locator("[data-field-row=secret]").is_visible()
        page.fill("#id_name", "ops-hook")
        page.fill("#id_url", "not a url")
        form.locator("button[type=submit]").click()
        url_row = page.locator("[data-channel-form] [data-field-row=url]")
        url_row.locator(".errorlist").wait_for(timeout=5000)
        assert "needs an http:// or https:// URL" in url_row.inner_text()
        assert page.input_value("#id_url") == "not a url" and page.input_value("#id_name") == "ops-hook"
        assert not NotificationChannel.objects.exists()
        page.fill("#id_url", receiver.url)
        page.fill("#id_secret", "s3cret")
        page.locator("[data-channel-form] button[type=submit]").click()
        page.locator(".messages", has_text="Channel ops-hook added").wait_for(timeout=5000)
        channel = NotificationChannel.objects.get()
        assert channel.config == {"url": receiver.url, "format": "sparkops"} and channel.secret == "s3cret"
        page.locator("tr", has_text="ops-hook").locator("button", has_text="Send test").click()
        deadline = time.monotonic() + 30
        while not receiver.requests:
            assert worker.poll() is None and time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-3000:]
            time.sleep(0.2)
        sent = receiver.requests[0]
        signature = hmac.new(b"s3cret", sent["body"], hashlib.sha256).hexdigest()
        assert sent["headers"].get("X-SparkOps-Signature") in (signature, f"sha256={signature}"), sent["headers"]
        deadline = time.monotonic() + 15
        while "test: sent" not in page.locator("tr", has_text="ops-hook").inner_text():
            assert time.monotonic() < deadline, page.locator("tr", has_text="ops-hook").inner_text()
            page.wait_for_timeout(500)
            page.reload()
        assert _no_sideways_scroll(page), "the channels page scrolls sideways"
        admin.shot("alerts-channels-added")
        expected_400 = [e for e in admin.errors if "400" in e]  # the refused submit answers 400, as it should
        assert len(expected_400) == 2 and [e for e in admin.errors if e not in expected_400] == [], admin.errors
    finally:
        stop(worker)
        receiver.server.shutdown()
