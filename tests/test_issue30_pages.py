"""Issue 30 §7, the web items, in real headless Chromium where they are visual (the project's
module-scoped `chromium` fixture, pytest-django's live server): what an operator saw at 1280x800
and 390x844 that read wrong. Screenshots in artifacts/screenshots/."""

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from dashboard.models import Engine
from tests.chromium import skip_without_chromium
from tests.live.test_browser import wait_for_js

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
DESK, PHONE = {"width": 1280, "height": 800}, {"width": 390, "height": 844}

skip_without_chromium()


def open_as(chromium, live_server, user, viewport=DESK):
    """A page logged in as USER through a session cookie (the login form is tested elsewhere)."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    session = SessionStore()
    # The backend a login would record: the session is honoured only for one of AUTHENTICATION_BACKENDS.
    session[SESSION_KEY], session[BACKEND_SESSION_KEY] = str(user.pk), settings.AUTHENTICATION_BACKENDS[-1]
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    context = chromium.new_context(viewport=viewport)
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session.session_key, "url": live_server.url}])
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    return page


def shot(page, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_a_dead_card_shows_no_decode_rate(chromium, live_server, viewer, fleet):
    """The engine died 20 s ago: its last 30 s of samples still average 88.9 tok/s, which the card
    showed as its decode now. A card that is not up says so and how long ago instead."""
    from tests.live.helpers import add_samples

    now = timezone.now()
    vllm = fleet["vllm"]
    Engine.objects.filter(pk=vllm.pk).update(
        status="down",
        status_changed_at=now - timedelta(minutes=3),
        latest={"up": False, "status": "down", "generation_tokens_per_s": 88.9},
    )
    add_samples(metric="generation_tokens_per_s", values=[88.9] * 10, end=now - timedelta(seconds=20), engine=vllm)
    add_samples(metric="generation_tokens_per_s", values=[88.9] * 10, end=now, engine=fleet["llama"])  # control
    Engine.objects.filter(pk=fleet["llama"].pk).update(status="up", latest={"up": True, "status": "up"})
    page = open_as(chromium, live_server, viewer)
    page.goto(live_server.url + "/")
    wait_for_js(
        page,
        f"document.querySelector('#engine-card-{fleet['llama'].id} [data-field=decode]').textContent.includes('30 s avg')",
    )  # the sparks loaded: the up card shows its rate
    card = page.locator(f"#engine-card-{vllm.id}")
    decode = card.locator("[data-field=decode]").inner_text()
    assert "88.9" not in decode and decode == "— down for 3\xa0minutes", decode
    assert "88.9" not in card.inner_text()
    assert "not up now" in card.locator("[data-field=spark-caption]").inner_text()
    shot(page, "issue30-dead-card-desk")
    assert page.errors == []


def test_incident_duration_reads_as_people_say_it(chromium, live_server, viewer, fleet):
    from dashboard.models import Incident

    opened = timezone.now() - timedelta(hours=2)
    Incident.objects.create(
        opened_at=opened,
        closed_at=opened + timedelta(seconds=117.126392),
        engine=fleet["vllm"],
        trigger="CUDA illegal instruction, exit 0, not restarted",
    )
    page = open_as(chromium, live_server, viewer, PHONE)
    page.goto(live_server.url + "/changelog/ledgers/")
    row = page.locator("tr", has_text="CUDA illegal instruction")
    assert "1 min 57 s" in row.inner_text() and "0:01:57" not in page.inner_text("body")
    shot(page, "issue30-incident-duration-phone")


def test_claims_render_the_change_logs_markdown(chromium, live_server, viewer, fleet):
    from sparkops.changelog.importer import apply_import, plan_import

    apply_import(
        plan_import(
            "## 2026-08-20 09:00 · Raise the window\n"
            "Engines: vllm-main\n"
            "Kind: claim\n"
            "Claim: vllm-main serves **11.2×** at `--max-model-len 32768`\n\n"
            "> Correction 2026-08-21 (claim 1): it was *10.3×*, measured after the restart.\n"
        )
    )
    page = open_as(chromium, live_server, viewer)
    page.goto(live_server.url + "/changelog/claims/")
    table = page.locator("#claims-table")
    assert table.locator("a strong").inner_text() == "11.2×" and table.locator("a code").count() == 1
    assert table.locator(".correction-summary em").inner_text() == "10.3×"
    assert "**" not in table.inner_text() and "`" not in table.inner_text()
    shot(page, "issue30-claims-desk")
    page.click("#claims-table a:has(strong)")  # the entry's own page renders it too
    assert page.locator(".claim-text strong").inner_text() == "11.2×"
    assert page.errors == []


def test_coresidency_says_what_its_percentage_is_relative_to(chromium, live_server, viewer, fleet):
    from tests.live.helpers import add_samples

    a, b, now = fleet["vllm"], fleet["llama"], timezone.now()
    # a: 100 tok/s alone for a minute, then 45 tok/s while b generates too
    add_samples(metric="generation_tokens_per_s", values=[100.0] * 30 + [45.0] * 30, end=now, engine=a)
    add_samples(metric="generation_tokens_per_s", values=[0.0] * 30 + [50.0] * 30, end=now, engine=b)
    page = open_as(chromium, live_server, viewer)
    page.goto(f"{live_server.url}/coresidency/?a={a.name}&b={b.name}")
    wait_for_js(page, "document.querySelectorAll('#coresidency-stats tbody tr').length === 2")
    row = page.locator("#coresidency-stats tbody tr", has_text=a.name)
    assert row.locator("td").nth(3).inner_text() == "−55 % (slower together)"
    assert "TOGETHER VS ALONE" in page.inner_text("#coresidency-stats thead")  # (upper-cased by CSS)
    explained = page.inner_text("#coresidency-explained")
    assert "relative to its own mean rate while it generated alone" in explained
    shot(page, "issue30-coresidency-desk")


def test_the_ledger_charts_axis_names_the_day_once(chromium, live_server, viewer, fleet):
    """Three pools on one day: the date appears once on the x axis, the ticks tell the hours apart."""
    from datetime import UTC, datetime

    from dashboard.models import KVPoolEntry

    for hour, pool in ((9, 766464), (12, 524288), (15, 700000)):
        KVPoolEntry.objects.create(
            engine=fleet["vllm"], recorded_at=datetime(2026, 8, 20, hour, tzinfo=UTC), pool_tokens=pool, window=32768
        )
    for size, viewport in (("desk", DESK), ("phone", PHONE)):
        page = open_as(chromium, live_server, viewer, viewport)
        page.goto(live_server.url + "/changelog/ledgers/")
        page.locator("#pool-chart .xtick text").first.wait_for()
        ticks = page.locator("#pool-chart .xtick text").all_text_contents()
        assert len(ticks) >= 3, ticks
        assert sum("Aug" in t for t in ticks) == 1, ticks  # the day once, not on every tick
        assert len(set(ticks)) == len(ticks), ticks
        shot(page, f"issue30-ledger-axis-{size}")
        assert page.errors == []
