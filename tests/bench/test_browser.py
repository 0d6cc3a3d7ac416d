"""Real headless Chromium draws a profile's trend with the shared chart helpers (static/js/charts.js):
both panels, the change-log entry as a ✎ line, and a theme switch redraws without errors."""
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from dashboard.bench.models import Profile, Run
from dashboard.changelog.models import Entry

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]

if not Path(CHROMIUM).exists():
    pytest.skip("needs Debian's chromium at /usr/bin/chromium", allow_module_level=True)


def _done_run(profile, when, median):
    run = Run.objects.create(engine=profile.engine, profile=profile, params_hash=profile.params_hash, status="done",
                             total_reps=1, done_reps=1,
                             stats={"decode_tokens_per_s": {"n": 1, "median": median, "min": median - 1, "max": median + 1},
                                    "ttft_ms": {"n": 1, "median": 50.0, "min": 49.0, "max": 51.0}})
    Run.objects.filter(pk=run.pk).update(created_at=when)


def test_profile_trend_draws_runs_and_change_log_entries(live_server, operator, fleet, monkeypatch):
    from playwright.sync_api import sync_playwright

    profile = Profile.objects.create(name="deep-32k", engine=fleet["vllm"], depth=32768)
    now = timezone.now()
    _done_run(profile, now - timedelta(hours=3), 60.0)
    _done_run(profile, now - timedelta(hours=1), 45.0)
    entry = Entry.objects.create(effective_at=now - timedelta(hours=2), kind="flag_change", title="--max-num-seqs 8 -> 16")
    entry.engines.add(fleet["vllm"])

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop in this thread
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.goto(f"{live_server.url}/login/?next=/bench/profiles/{profile.pk}/")
        page.fill("#id_username", "otto")
        page.fill("#id_password", "otto-password-123")
        page.click("button[type=submit]")
        for panel in ("trend-decode", "trend-ttft"):
            page.wait_for_selector(f"#{panel} .main-svg", timeout=10000)
        hover = page.evaluate("document.getElementById('trend-decode').layout.annotations.map(a => a.hovertext)")
        assert hover == ["--max-num-seqs 8 -> 16"]
        assert page.evaluate("document.getElementById('trend-decode').data[0].y") == [60.0, 45.0]
        page.click("#theme-toggle")
        page.wait_for_function("document.getElementById('trend-decode').layout.font.color === "
                               "getComputedStyle(document.documentElement).getPropertyValue('--fg').trim()", timeout=5000)
        browser.close()
    assert errors == []
