"""Real headless Chromium, at a desk (1280×800) and on a phone (390×844): an operator schedules a needle
probe from the form, the scheduled run (what beat sends, against a simulated vLLM) shows its result table,
the simulated engine's recall at 90 % drops to a decoy and the next scheduled run fires
`quality_regression` on the alerts page; the probe's trend charts both runs. No page scrolls sideways.
Screenshots: artifacts/screenshots/probes-*-desk.png and -phone.png."""

import threading

import pytest

from sparkops.probes.models import ProbeProfile, ProbeRun
from sparkops.probes.spec import ProbeSpec
from tests.boxes import box_worker
from tests.chromium import skip_without_chromium
from tests.live.test_browser import SHOTS, Session, browser, wait_for_js  # noqa: F401  (browser: the shared Chromium)
from tests.live.test_phone_browser import web  # noqa: F401  (web: uvicorn on the test database)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SIZES = {"desk": (1280, 800), "phone": (390, 844)}

skip_without_chromium()


def scheduled(profile):
    """What beat sends for the profile, run in a worker thread (Playwright's loop owns this one)."""
    from django.db import connection

    from sparkops.probes.tasks import probe_profile_scheduled

    failure = []

    def work():
        try:
            with box_worker(profile.engine.host):  # the box's worker, there: it runs what is sent to it
                probe_profile_scheduled(profile.pk)
        except Exception as exc:  # surfaced below
            failure.append(repr(exc))
        finally:
            connection.close()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive() and not failure, failure
    return ProbeRun.objects.filter(profile=profile).latest("created_at")


def closing(fn):
    """FN for a worker thread: its own DB connection, closed after (the test database is dropped at the end)."""

    def work():
        from django.db import connection

        try:
            fn()
        finally:
            connection.close()

    return work


def run_in_thread(fn):
    thread = threading.Thread(target=closing(fn), daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive()


def shots(ops, name):
    page = ops.page
    for size, (width, height) in SIZES.items():
        page.set_viewport_size({"width": width, "height": height})
        page.reload()
        page.wait_for_load_state("networkidle")
        wide = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert wide <= 0, f"{name} scrolls sideways by {wide}px at {size}"
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"probes-{name}-{size}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 800})


def test_schedule_a_probe_see_its_table_and_the_regression_fire(web, browser, operator, sim, make_engine):
    eng = sim("vllm")
    engine = make_engine(eng.url, name="sim-vllm")
    ops = Session(browser, web.base, operator)
    page = ops.page

    page.goto(f"{web.base}/probes/")
    page.click("#probe-new")
    page.fill("#id_name", "nightly-needle")
    page.select_option("#id_engine", str(engine.pk))
    page.select_option("#id_kind", "needle")
    page.fill("#id_tokens", "1500")
    page.fill("#id_depths", "10,50,90")
    page.fill("#id_decoys", "2")
    page.fill("#id_cron", "0 4 * * *")
    page.click("#probe-form button[type=submit]")
    page.wait_for_selector("#probe-schedule")
    assert "0 4 * * *" in page.inner_text("#probe-schedule")
    profile = ProbeProfile.objects.get(name="nightly-needle")
    assert profile.schedule.task == "probe.profile_scheduled" and profile.schedule.enabled

    good = scheduled(profile)
    assert good.passed is True, good.reason
    page.goto(f"{web.base}/probes/runs/{good.pk}/")
    cells = page.locator("#probe-result tbody tr").first.locator("td")
    assert [cells.nth(i).inner_text() for i in (2, 3, 4)] == ["HIT 3/3", "HIT 3/3", "HIT 3/3"]
    assert page.locator("#probe-cases tbody tr").count() == 9
    shots(ops, "run-good")

    eng.cfg.needle_recall, eng.cfg.needle_decoy = "10:1,50:1,90:0", 1.0  # the deep needle now goes to a decoy
    bad = scheduled(profile)
    assert bad.regression is True
    page.goto(f"{web.base}/probes/runs/{bad.pk}/")
    cells = page.locator("#probe-result tbody tr").first.locator("td")
    assert cells.nth(4).inner_text() == "DECOY 3/3 decoy at 56.7 %"  # the decoy nearest the needle won
    assert "90%: HIT -> DECOY 3/3" in page.inner_text("#probe-regression")
    shots(ops, "run-regression")

    page.goto(f"{web.base}/alerts/")
    firing = page.locator("#alerts-firing-list li", has_text="quality_regression")
    assert firing.count() == 1 and "probe nightly-needle" in firing.inner_text()
    shots(ops, "alerts")

    from sparkops.changelog.models import Entry

    entry = Entry.objects.create(effective_at=bad.created_at, kind="flag_change", title="--kv-cache-dtype fp8")
    entry.engines.add(engine)
    page.goto(f"{web.base}/probes/profiles/{profile.pk}/")
    page.wait_for_selector("#probe-trend-chart .main-svg", timeout=10000)
    marks = page.evaluate("document.getElementById('probe-trend-chart').layout.annotations.map(a => a.hovertext)")
    assert marks == ["--kv-cache-dtype fp8"]  # the change-log entry as a mark on the trend
    ys = page.evaluate("document.getElementById('probe-trend-chart').data[0].y")
    assert ys[0] == 1 and abs(ys[1] - 2 / 3) < 1e-9
    assert page.locator("#needle-table tbody tr").count() == 2
    shots(ops, "profile")

    # A run's page follows it live over the WebSocket (probe.progress events), then shows the result.
    from sparkops.probes.services import probe_run_create, probe_run_execute

    queued = probe_run_create(engine=engine, spec=profile.spec(), profile=profile)
    page.goto(f"{web.base}/probes/runs/{queued.pk}/")
    assert page.inner_text("#run-status-text") == "queued"
    page.wait_for_timeout(500)  # the socket joins its groups; run.js catches up with ?format=progress anyway

    worker = threading.Thread(
        target=closing(lambda: probe_run_execute(run=ProbeRun.objects.get(pk=queued.pk))), daemon=True
    )
    worker.start()
    wait_for_js(page, "document.getElementById('run-status').dataset.live === '0'", timeout=60000)
    worker.join(30)
    assert page.inner_text("#run-status-text") == "done" and page.inner_text("#run-progress-text") == "9 / 9 requests"
    assert page.locator("#probe-result tbody tr").count() == 1

    # The engine page says what an agent will see over the window, from the newest contract probe.
    small = make_engine(sim("vllm", max_model_len=2048).url, name="sim-small", window=2048)
    contract = ProbeSpec(engine_name=small.name, engine_kind="vllm", base_url=small.base_url, kind="contract")
    run_in_thread(lambda: probe_run_execute(run=probe_run_create(engine=small, spec=contract)))
    page.goto(f"{web.base}/engines/sim-small/")
    panel = page.inner_text("#probe-contract")
    assert panel.index("prompt+max_tokens over") < panel.index("prompt alone over")  # in the order sent
    assert 'finish_reason "length"' in panel and "HTTP 400" in panel and "maximum context length is 2048" in panel
    shots(ops, "engine-contract")
    assert ops.errors == []
    from django.db import connection

    connection.close()  # Playwright's greenlets gave this body its own connection; left open it blocks the DB drop
