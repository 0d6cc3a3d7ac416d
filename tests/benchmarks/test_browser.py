"""Real headless Chromium draws a profile's trend with the shared chart helpers (static/js/charts.js):
both panels, the change-log entry as a ✎ line, and a theme switch redraws without errors; and a
run page's progress bar follows each repetition live over the WebSocket, then shows the result."""

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from sparkops.benchmarks.models import Profile, Run
from sparkops.changelog.models import Entry
from tests.chromium import ARGS, CHROMIUM, skip_without_chromium
from tests.live.test_browser import Session, browser, wait_for_js  # noqa: F401  (browser: the shared Chromium fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

skip_without_chromium()


def _done_run(profile, when, median, regression=False):
    run = Run.objects.create(
        regression=regression,
        engine=profile.engine,
        profile=profile,
        params_hash=profile.params_hash,
        status="done",
        total_reps=1,
        done_reps=1,
        stats={
            "decode_tokens_per_s": {"n": 1, "median": median, "min": median - 1, "max": median + 1},
            "ttft_ms": {"n": 1, "median": 50.0, "min": 49.0, "max": 51.0},
        },
    )
    Run.objects.filter(pk=run.pk).update(created_at=when)


def test_profile_trend_draws_runs_and_change_log_entries(asgi_server, operator, fleet, monkeypatch):
    from playwright.sync_api import sync_playwright

    profile = Profile.objects.create(name="deep-32k", engine=fleet["vllm"], depth=32768)
    now = timezone.now()
    for i, median in enumerate((60.0, 60.5, 59.5, 60.2, 59.8)):
        _done_run(profile, now - timedelta(hours=3, minutes=10 - i), median)
    _done_run(profile, now - timedelta(hours=1), 45.0, regression=True)
    entry = Entry.objects.create(
        effective_at=now - timedelta(hours=2), kind="flag_change", title="--max-num-seqs 8 -> 16"
    )
    entry.engines.add(fleet["vllm"])

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop in this thread
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.goto(f"{asgi_server.url}/login/?next=/bench/profiles/{profile.pk}/")
        page.fill("#id_username", "otto")
        page.fill("#id_password", "otto-password-123")
        page.click("button[type=submit]")
        for panel in ("trend-decode", "trend-ttft"):
            page.wait_for_selector(f"#{panel} .main-svg", timeout=10000)
        hover = page.evaluate("document.getElementById('trend-decode').layout.annotations.map(a => a.hovertext)")
        assert hover == ["--max-num-seqs 8 -> 16"]
        medians = page.evaluate("document.getElementById('trend-decode').data[0].y")
        assert medians == [60.0, 60.5, 59.5, 60.2, 59.8, 45.0]
        # The noise band: the 45.0 run is a regression (red, outside); the band comes from the five before it,
        # median 60.0 ± max(5 % = 3.0, 3 × spread 1.0 = 3.0).
        band = page.evaluate(
            "document.getElementById('trend-decode').layout.shapes.filter(s => s.type === 'rect').map(s => [s.y0, s.y1])"
        )
        assert band == [[pytest.approx(57.0), pytest.approx(63.0)]]
        shots = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
        shots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shots / "bench-trend-desk.png"), full_page=True)
        page.click("#theme-toggle")
        wait_for_js(
            page,
            "document.getElementById('trend-decode').layout.font.color === "
            "getComputedStyle(document.documentElement).getPropertyValue('--fg').trim()",
            timeout=5000,
        )
        browser.close()
    assert errors == []


# The run page's live progress bar, end to end: uvicorn (HTTP + WebSocket) on the test database,
# the Redis channel layer, a simulated vLLM engine, and the run executed by the very service the
# Celery task calls (sparkops/benchmarks/tasks.py is a thin wrapper around run_execute).

# Every change of the progress box, with the document it happened in (a reload starts a new one).
OBSERVE_PROGRESS = """
document.addEventListener("DOMContentLoaded", () => {
  const box = document.getElementById("run-status");
  if (!box) return;
  const doc = String(performance.timeOrigin), bar = document.getElementById("run-progress");
  const snap = () => window.benchSeen({doc, live: box.dataset.live, value: bar.value, max: bar.max,
    status: document.getElementById("run-status-text").textContent.trim(),
    text: document.getElementById("run-progress-text").textContent.trim()});
  snap();
  new MutationObserver(snap).observe(box, {subtree: true, childList: true, characterData: true, attributes: true});
});
"""


def _until(page, predicate, timeout, what):
    """Let Playwright deliver its events (socket frames, bindings) until PREDICATE holds."""
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        page.wait_for_timeout(50)


def test_run_page_follows_each_repetition_live_then_shows_the_result(
    sim, make_engine, operator, browser, tmp_path, monkeypatch, shared_web
):
    import json
    import threading

    from django.db import connection

    from sparkops.benchmarks.services import run_create, run_execute

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop in this thread
    eng = sim("vllm", rate=40.0, ttft=0.05)  # 32 tokens at 40 tok/s: ~0.8 s per repetition
    engine = make_engine(eng.url, name="sim-vllm")
    profile = Profile.objects.create(name="live-bar", engine=engine, depth=256, output_tokens=32, reps=3)
    run = run_create(engine=engine, spec=profile.spec(), profile=profile)  # queued, as run_enqueue leaves it
    assert run.status == "queued" and run.total_reps == 3

    _web, base, _log = shared_web
    worker, failure = None, []
    try:
        ops = Session(browser, base, operator)
        page, seen, frames = ops.page, [], []
        page.expose_function("benchSeen", lambda state: seen.append(state))  # noqa: PLW0108 (Playwright reads its signature)
        page.add_init_script(OBSERVE_PROGRESS)
        page.on("websocket", lambda ws: ws.on("framereceived", lambda data: frames.append(json.loads(data))))
        # The page's catch-up read (on the socket's hello) is held until the run has moved on, then
        # answered: a reading behind the page's, which it must not draw (it once took the page back to
        # "queued" mid-run, when the read was answered after the socket's first event).
        held = []
        page.route(
            re.compile(rf"/bench/runs/{run.pk}/\?format=progress$"), lambda route: held.append((route, route.fetch()))
        )
        page.goto(f"{base}/bench/runs/{run.pk}/")
        assert page.locator("#run-status-text").inner_text() == "queued"
        # The page's socket has joined its groups (the server says hello after group_add): start the worker.
        _until(page, lambda: any(f["type"] == "live.hello" for f in frames), 10, "the run page's socket never opened")
        _until(page, lambda: held, 10, "the run page did not catch up on its socket's hello")
        catch_up, stale = held[0]
        assert stale.json()["status"] == "queued" and stale.json()["done"] == 0

        def work():
            try:
                run_execute(run=Run.objects.select_related("engine", "profile").get(pk=run.pk))
            except Exception as exc:  # surfaced below
                failure.append(repr(exc))
            finally:
                connection.close()

        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        _until(page, lambda: any(s["value"] == 1 for s in seen), 30, "the page did not draw the first repetition")
        answered = []
        page.on(
            "requestfinished",
            lambda request: answered.append(request.url) if "format=progress" in request.url else None,
        )
        catch_up.fulfill(response=stale)
        _until(page, lambda: answered, 10, "the held catch-up was not answered")
        _until(page, lambda: not worker.is_alive(), 60, "the run did not finish")
        assert not failure, failure
        # When the run ends the page reloads once to show the server-rendered result.
        wait_for_js(page, "document.getElementById('run-status').dataset.live === '0'")

        progress = [
            (f["payload"]["done"], f["payload"]["total"], f["payload"]["status"])
            for f in frames
            if f["type"] == "bench.progress" and f["payload"]["run"] == run.pk
        ]
        assert progress == [(0, 3, "running"), (1, 3, "running"), (2, 3, "running"), (3, 3, "running"), (3, 3, "done")]

        # Every state, queued to done, drawn in the document first opened: no reload until the end.
        first = seen[0]["doc"]
        assert page.evaluate("String(performance.timeOrigin)") != first, "the finished run was not reloaded"
        states = []
        for s in seen:
            if s["doc"] == first:
                state = (s["value"], s["max"], s["status"], s["text"])
                if not states or states[-1] != state:
                    states.append(state)
        assert states == [
            (0, 3, "queued", "0 / 3 requests"),
            (0, 3, "running", "0 / 3 requests"),
            (1, 3, "running", "1 / 3 requests"),
            (2, 3, "running", "2 / 3 requests"),
            (3, 3, "running", "3 / 3 requests"),
            (3, 3, "done", "3 / 3 requests"),
        ]

        # The result, rendered by the server after the reload: done, every repetition, the figures.
        assert page.locator("#run-status-text").inner_text() == "done"
        assert page.locator("#run-progress-text").inner_text() == "3 / 3 requests"
        rows = page.locator("#run-reps tbody tr")
        assert rows.count() == 3 and all(rows.nth(i).locator("td").nth(2).inner_text() == "ok" for i in range(3))
        decode = page.locator("#run-stats tbody tr", has_text="decode_tokens_per_s")
        assert decode.locator("td").nth(1).inner_text() == "3"
        run.refresh_from_db()
        assert (
            abs(float(decode.locator("td").nth(2).inner_text()) - run.stats["decode_tokens_per_s"]["median"]) <= 0.006
        )
        assert ops.errors == []
    finally:
        if worker is not None:
            worker.join(30)
        # Under Playwright's greenlets this body has its own DB connection (asgiref's context-local
        # connections); left open, it would block dropping the test database at the end.
        connection.close()
