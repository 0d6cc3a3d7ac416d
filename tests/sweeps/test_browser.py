"""Real Chromium runs a sweep from the UI: the form queues it, a real Celery worker runs its cells against
a simulated engine, the page fills each cell's row live over the WebSocket, and its chart draws the table's
figures. Screenshots at desk (1280×800) and phone (390×844) sizes; no sideways scroll on the phone."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection

from sparkops.benchmarks.models import Sweep
from tests.boxes import worker_reported
from tests.live.test_browser import SHOTS, Session, browser, wait_for_js  # noqa: F401  (browser: shared Chromium)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
if not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
    pytest.skip("a worker subprocess needs a database server", allow_module_level=True)

# Every state of every cell row, with the document it was seen in (a reload starts a new one).
OBSERVE_ROWS = """
document.addEventListener("DOMContentLoaded", () => {
  const body = document.querySelector("#sweep-cells tbody");
  if (!body) return;
  const doc = String(performance.timeOrigin);
  const snap = () => window.sweepSeen({doc, rows: [...body.querySelectorAll("tr")].map(
    tr => [Number(tr.dataset.value), tr.dataset.state]),
    progress: [...body.querySelectorAll(".cell-progress")].map(span => span.textContent)});
  snap();
  new MutationObserver(snap).observe(body, {subtree: true, childList: true});
});
"""


def start_worker(tmp_path, queue):
    db = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "sparkops.settings",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{connection.settings_dict['NAME']}",
    }
    env.pop("SPARKOPS_TEST_DB_NAME", None)
    log = open(tmp_path / "worker.log", "w")  # noqa: SIM115 (the child's log: open while it runs)
    args = ["worker", "--pool=solo", "--without-heartbeat", "--without-gossip", "--without-mingle", "-Q", queue]
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "sparkops", *args, "-n", "sweeps@h", "-l", "INFO"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _until(page, predicate, timeout, what):
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        page.wait_for_timeout(50)


def test_sweep_from_the_ui_fills_cells_live_and_charts_them(
    sim, make_engine, operator, browser, tmp_path, monkeypatch, shared_web
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop in this thread
    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()  # no task left queued by an earlier test
    eng = sim("vllm", rate=60.0, aggregate_cap=150.0, ttft=0.01)  # 48 tokens: about 0.8 s to 1.3 s per cell
    engine = make_engine(eng.url, name="sim-sweep")
    _web, base, _log = shared_web
    worker = None
    try:
        ops = Session(browser, base, operator)
        page, seen, frames = ops.page, [], []
        page.expose_function("sweepSeen", lambda state: seen.append(state))  # noqa: PLW0108 (Playwright reads its signature)
        page.add_init_script(OBSERVE_ROWS)
        page.on("websocket", lambda ws: ws.on("framereceived", lambda data: frames.append(json.loads(data))))

        page.goto(f"{base}/bench/")
        page.click("text=New sweep")
        page.select_option("#id_engine", str(engine.pk))
        page.select_option("#id_axis", "concurrency")
        page.fill("#id_values", "1,2,4")
        page.fill("#id_output_tokens", "48")
        page.fill("#id_reps", "1")
        worker_reported(engine.host)  # its worker reported (it starts below, once the page listens)
        page.click("#sweep-form button[type=submit]")
        page.wait_for_url(f"{base}/bench/sweeps/*/")
        sweep = Sweep.objects.get()
        assert page.locator("#sweep-cells tbody tr").count() == 3
        assert sweep.status == "queued"  # in the box's queue, waiting for its worker
        # The page's socket has joined its groups (the server says hello after group_add): start the worker.
        _until(page, lambda: any(f["type"] == "live.hello" for f in frames), 10, "the sweep page's socket never opened")
        worker = start_worker(tmp_path, engine.host.queue)

        _until(page, lambda: Sweep.objects.filter(pk=sweep.pk, status="done").exists(), 90,
               "the sweep did not finish: " + (tmp_path / "worker.log").read_text()[-2000:])  # fmt: skip
        wait_for_js(page, "document.getElementById('sweep-status').dataset.live === '0'", timeout=15000)

        events = [f["payload"] for f in frames if f["type"] == "bench.sweep" and f["payload"]["sweep"] == sweep.pk]
        assert [(e.get("value"), e["status"]) for e in events if "html" in e] == [
            (1, "running"), (1, "running"), (2, "running"), (2, "running"), (4, "running"), (4, "running"),
        ]  # fmt: skip
        # In the document first opened (before the end-of-sweep reload) the rows went waiting → running → done
        # one cell after the other.
        first = seen[0]["doc"]
        states = []
        for s in seen:
            if s["doc"] == first and (not states or states[-1] != s["rows"]):
                states.append(s["rows"])
        assert states[0] == [[1, "waiting"], [2, "waiting"], [4, "waiting"]]
        assert [[1, "running"], [2, "waiting"], [4, "waiting"]] in states
        assert [[1, "done"], [2, "running"], [4, "waiting"]] in states
        assert [[1, "done"], [2, "done"], [4, "running"]] in states
        assert states[-1] == [[1, "done"], [2, "done"], [4, "done"]]
        counted = {text for s in seen if s["doc"] == first for text in s["progress"] if text}
        assert "· 4 / 4 requests" in counted, counted  # the running cell counted its requests from its run's events

        # After the reload: the server-rendered table and the chart of the same figures.
        sweep.refresh_from_db()
        page.click("text=Chart")
        page.wait_for_selector("#sweep-chart .main-svg", timeout=10000)
        traces = page.evaluate("document.getElementById('sweep-chart').data.map(t => [t.name, t.x, t.y])")
        assert traces == [
            ["aggregate decode", [1, 2, 4], [r["aggregate_decode_tokens_per_s"] for r in sweep.table]],
            ["per-stream decode", [1, 2, 4], [r["per_stream_decode_tokens_per_s"] for r in sweep.table]],
        ]
        agg = [r["aggregate_decode_tokens_per_s"] for r in sweep.table]
        # The page's flow is this test's; the figures' accuracy is tests/sweeps/test_cells.py's. With a
        # browser, uvicorn and the engine on two cores a cell came out 7 % low at load 3-8: within
        # 15 % still tells one stream's 60 tok/s from four streams held to the 150 tok/s cap.
        assert agg[0] == pytest.approx(60, rel=0.15) and agg[2] == pytest.approx(150, rel=0.15)
        cell = page.locator('#sweep-cells tr[data-value="4"] td.agg').inner_text()
        assert cell.startswith(f"{agg[2]:.1f}")
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.evaluate("window.scrollTo(0, 0)")  # the sticky top bar stays at the top of a full-page shot
        page.screenshot(path=str(SHOTS / "sweep-desk.png"), full_page=True)

        phone = ops.context.browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
        phone.add_cookies(ops.context.cookies())
        ppage = phone.new_page()
        ppage.goto(f"{base}/bench/sweeps/{sweep.pk}/")
        ppage.wait_for_selector("#sweep-chart .main-svg", timeout=10000)
        assert ppage.evaluate("document.documentElement.scrollWidth") <= 390
        ppage.screenshot(path=str(SHOTS / "sweep-phone.png"), full_page=True)
        phone.close()
        assert ops.errors == []
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(15)
            except subprocess.TimeoutExpired:
                worker.kill()
        connection.close()
