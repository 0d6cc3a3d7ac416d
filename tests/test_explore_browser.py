"""Explore and Availability in real headless Chromium (issue 51), under the Content-Security-Policy:
a shared Explore address draws its traces (two engines, one series), the change-log entry and the
alert on them, and a zoom writes the range back into the address; the availability page of a day
reads its 99.65 %. Both pages at 1280×800 and 390×844, without sideways scroll, photographed to
artifacts/screenshots/ (explore-*.png, availability-*.png)."""

from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.utils import timezone

from dashboard.models import Engine, Host
from sparkops.alerts.models import AlertEvent
from sparkops.changelog.models import SPARKOPS_AUTHOR
from sparkops.changelog.services import entry_create
from tests.chromium import skip_without_chromium
from tests.live.helpers import add_samples
from tests.live.test_browser import Session, browser, wait_for_js  # noqa: F401  (browser: the shared Chromium)
from tests.test_csp_browser import RECORD_VIOLATIONS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

skip_without_chromium()

SIZES = {"desk": (1280, 800), "phone": (390, 844)}
TRACES = "JSON.stringify((document.getElementById('explore-chart').data || []).map(t => [t.name, t.x.length]))"


def _z(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def seen(fleet, operator):
    """Half an hour of KV usage of both engines up to now, an entry on vllm-main and a warning on
    llama-side inside it; the address an operator would share."""
    now = timezone.now()
    vllm, llama = fleet["vllm"], fleet["llama"]
    add_samples(metric="kv_cache_usage", values=[0.3 + (i % 300) / 1000 for i in range(900)], end=now, engine=vllm)
    add_samples(metric="kv_cache_usage", values=[0.6 - (i % 200) / 1000 for i in range(900)], end=now, engine=llama)
    entry_create(
        author=operator,
        effective_at=now - timedelta(minutes=15),
        title="--max-num-seqs 8 -> 16",
        kind="flag_change",
        engines=[vllm],
    )
    AlertEvent.objects.create(
        rule="kv_saturated",
        severity="warning",
        state="resolved",
        engine=llama,
        subject=llama.name,
        message="KV usage of llama-side above 95 %",
        started_at=now - timedelta(minutes=25),
        fired_at=now - timedelta(minutes=24),
        resolved_at=now - timedelta(minutes=20),
    )
    query = [("metric", "kv_cache_usage"), ("engine", "vllm-main"), ("engine", "llama-side")]
    query += [("start", _z(now - timedelta(minutes=35))), ("end", _z(now + timedelta(minutes=1)))]
    return "/explore/?" + urlencode(query)


def _session(browser, web, user, size):
    return Session(browser, web, user, init_script=RECORD_VIOLATIONS, viewport=SIZES[size])


def _fits(page, width):
    assert page.evaluate("document.documentElement.scrollWidth") <= width, "the page scrolls sideways"


@pytest.mark.parametrize("size", list(SIZES))
def test_a_shared_explore_address_draws_its_traces_and_marks(browser, shared_web, viewer, seen, size):
    tab = _session(browser, shared_web[1], viewer, size)
    page = tab.page
    page.goto(tab.base + seen)
    wait_for_js(page, "document.getElementById('explore-chart').dataset.traces === '2'", timeout=15000)
    traces = page.evaluate(TRACES)
    assert traces == '[["vllm-main",900],["llama-side",900]]'
    layout = page.evaluate(
        "JSON.stringify((l => [l.shapes.map(s => s.type), l.annotations.map(a => a.text)])"
        "(document.getElementById('explore-chart').layout))"
    )
    assert layout == '[["line","rect"],["✎","⚠"]]'  # the entry's line, the alert's shading and their marks
    assert page.locator("#explore-chart .main-svg").count() >= 1
    assert page.evaluate("window.__csp") == [] and tab.errors == []
    _fits(page, SIZES[size][0])
    tab.shot(f"explore-{size}")
    # A zoom: the address now holds the range shown (start/end, no preset), and so does the link.
    page.evaluate(
        "Plotly.relayout('explore-chart', {'xaxis.range[0]': '2026-12-06 10:00:00', 'xaxis.range[1]': '2026-12-06 10:30:00'})"
    )
    wait_for_js(page, "location.search.indexOf('2026-12-06T10%3A30%3A00Z') > 0")
    query = parse_qs(urlsplit(page.url).query)
    assert query["start"] == ["2026-12-06T10:00:00Z"] and query["end"] == ["2026-12-06T10:30:00Z"]
    assert query["engine"] == ["vllm-main", "llama-side"] and query["metric"] == ["kv_cache_usage"]
    assert page.get_attribute("#explore-link", "href") == "?" + urlsplit(page.url).query
    tab.context.close()


@pytest.fixture
def yesterday(fleet, admin_user):
    """Yesterday with one 5-minute outage of vllm-main and one planned restart (SparkOps's notes, as
    the Restart button writes them, and the down record the probe made meanwhile)."""
    day = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)
    Engine.objects.update(created_at=day - timedelta(days=2))
    Host.objects.update(created_at=day - timedelta(days=2))
    vllm = fleet["vllm"]
    for hh, mm, ss, title in (
        (14, 0, 0, "Restart of vllm-main.service requested by ada (through host.spark-1)"),
        (14, 0, 20, "systemctl restart vllm-main.service on spark-1: done"),
    ):
        moment = day.replace(hour=hh, minute=mm, second=ss)
        entry_create(
            author_name=SPARKOPS_AUTHOR, effective_at=moment, title=title, kind="incident_note", engines=[vllm]
        )
    for start, end, cause in (((10, 0, 0), (10, 5, 0), "exit0_no_restart"), ((14, 0, 5), (14, 1, 30), "refused")):
        began = day.replace(hour=start[0], minute=start[1], second=start[2])
        AlertEvent.objects.create(
            rule="engine_down",
            severity="critical",
            state="resolved",
            engine=vllm,
            subject=vllm.name,
            cause=cause,
            message="vllm-main is down",
            started_at=began,
            fired_at=began + timedelta(seconds=1),
            resolved_at=day.replace(hour=end[0], minute=end[1], second=end[2]),
        )
    return day


@pytest.mark.parametrize("size", list(SIZES))
def test_the_availability_page_reads_the_day(browser, shared_web, viewer, yesterday, size):
    tab = _session(browser, shared_web[1], viewer, size)
    page = tab.page
    page.goto(f"{tab.base}/availability/?period=day&start={yesterday.date().isoformat()}")
    assert page.inner_text("#availability-engines tr[data-name=vllm-main] td.uptime") == "99.65 %"
    assert page.inner_text("#availability-engines tr[data-name=llama-side] td.uptime") == "100.00 %"
    text = page.inner_text("main")
    assert "during planned work (restart requested at 14:00:00), not counted" in text
    assert "Restart of vllm-main.service requested by ada (through host.spark-1) — done" in text
    assert page.evaluate("window.__csp") == [] and tab.errors == []
    _fits(page, SIZES[size][0])
    tab.shot(f"availability-{size}")
    # The week holding it: the day stands out among the others, day by day.
    page.goto(f"{tab.base}/availability/?period=week&start={yesterday.date().isoformat()}")
    day = page.locator("#availability-engines-vllm-main + ul.availability-days li.down")
    assert day.count() == 1 and day.inner_text().endswith("99.65 %")
    assert page.evaluate("window.__csp") == [] and tab.errors == []
    _fits(page, SIZES[size][0])
    tab.shot(f"availability-week-{size}")
    tab.context.close()
