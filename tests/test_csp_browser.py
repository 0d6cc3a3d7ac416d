"""The Content-Security-Policy in real headless Chromium: the login and lockout pages carry the header
and run with no console error, no page error and no CSP violation, under uvicorn (HTTP + WebSocket) on
the test database. Every main page (live views with their Plotly charts and WebSocket, alerts, change
log, ledgers, benchmarks, the Django admin) is held to the same in tests/live/test_phone_browser.py's
sweep of every page, with this module's recorder and header check."""

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.models import Incident, KVPoolEntry
from sparkops.alerts.models import AlertEvent, MaintenanceWindow, Silence
from sparkops.benchmarks.models import Profile, Run
from sparkops.changelog.models import Entry
from tests.chromium import skip_without_chromium
from tests.live.helpers import add_samples
from tests.live.test_browser import browser  # noqa: F401  (browser: the shared Chromium fixture)
from tests.live.test_pages import HOST, READING

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

skip_without_chromium()

# Every violation, as the page itself sees it (console messages say it too; this is the sure way).
RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", e =>
  window.__csp.push(e.violatedDirective + " " + (e.blockedURI || "inline") + " " + (e.sourceFile || "") + ":" + e.lineNumber));
"""
DIRECTIVES = [
    "default-src 'self'",
    "script-src 'self'",
    "img-src 'self' data:",
    "frame-ancestors 'none'",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
]


def _policy(header):
    return {part.strip().split(" ", 1)[0]: part.strip() for part in header.split(";") if part.strip()}


def _check_header(response, base):
    header = response.headers.get("content-security-policy")
    assert header, f"{response.url}: no Content-Security-Policy header"
    policy = _policy(header)
    for directive in DIRECTIVES:
        assert policy.get(directive.split(" ")[0]) == directive, (response.url, header)
    host = base.split("://", 1)[1]
    assert policy["connect-src"] == f"connect-src 'self' ws://{host} wss://{host}", header
    assert policy["style-src"].startswith("style-src 'self'"), header
    assert "'unsafe-inline'" not in policy["script-src"] and "'unsafe-eval'" not in header, header


@pytest.fixture
def everything(fleet, operator, admin_user):
    """One of each thing the main pages show: readings (cards with bars), chart history, a firing
    and a resolved alert, a silence and a maintenance window, a change-log entry, a KV-pool row,
    an engine incident, a benchmark profile with two finished runs."""
    now = timezone.now()
    vllm, llama, host = fleet["vllm"], fleet["llama"], fleet["host"]
    vllm.latest = {
        **READING,
        "up": True,
        "status": "up",
        "error": "",
        "generation_tokens_per_s": 61.5,
        "kv_cache_usage": 0.37,
        "requests_running": 2,
    }
    vllm.save()
    llama.latest = READING
    llama.save()
    host.latest = HOST
    host.save()
    end = now - timedelta(seconds=10)
    for engine in (vllm, llama):
        add_samples(metric="generation_tokens_per_s", values=[50 + i % 9 for i in range(120)], end=end, engine=engine)
        add_samples(metric="kv_cache_usage", values=[0.3] * 120, end=end, engine=engine)
    add_samples(metric="psi.memory.some.avg10", values=[(i % 30) / 3 for i in range(120)], end=end, host=host)
    add_samples(metric="gpu0.sm_clock_mhz", values=[2400 - i % 40 for i in range(120)], end=end, host=host)
    firing = AlertEvent.objects.create(
        rule="engine_down",
        severity="critical",
        state="firing",
        engine=llama,
        subject="llama-side",
        message="exited 0",
        started_at=now,
        fired_at=now,
    )
    AlertEvent.objects.create(
        rule="prefix_cache_drop",
        severity="warning",
        state="resolved",
        engine=vllm,
        subject="vllm-main",
        message="hit rate fell",
        started_at=now - timedelta(hours=1),
        fired_at=now - timedelta(hours=1),
        resolved_at=now - timedelta(minutes=30),
    )
    Silence.objects.create(engine=vllm, until=now + timedelta(hours=2), reason="tuning", created_by=operator)
    MaintenanceWindow.objects.create(
        starts_at=now + timedelta(hours=1),
        ends_at=now + timedelta(hours=2),
        engine=vllm,
        reason="driver update",
        created_by=operator,
    )
    entry = Entry.objects.create(
        effective_at=now - timedelta(minutes=2),
        kind="flag_change",
        title="--max-num-seqs 8 -> 16",
        body_md="Raised **max-num-seqs**.",
    )
    entry.engines.add(vllm)
    KVPoolEntry.objects.create(
        recorded_at=now - timedelta(days=1),
        engine=vllm,
        memory_share=0.8,
        pool_tokens=412_000,
        window=65536,
        concurrency=6.3,
        note="after restart",
    )
    Incident.objects.create(
        opened_at=now - timedelta(hours=3),
        engine=llama,
        unit="llama-side.service",
        trigger="CUDA illegal instruction, exit 0, not restarted",
    )
    profile = Profile.objects.create(name="deep-32k", engine=vllm, depth=32768)
    runs = []
    for hours, median in ((3, 60.0), (1, 45.0)):
        run = Run.objects.create(
            engine=vllm,
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
        Run.objects.filter(pk=run.pk).update(created_at=now - timedelta(hours=hours))
        runs.append(run)
    return {"fleet": fleet, "alert": firing, "entry": entry, "profile": profile, "runs": runs}


@pytest.fixture
def web(shared_web):
    return shared_web[1]


class Tab:
    """One browser context; collects console errors, page errors and CSP violations per page."""

    def __init__(self, browser, base):
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.context.add_init_script(RECORD_VIOLATIONS)
        self.page, self.base, self.errors = self.context.new_page(), base, []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text}"))
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on("response", lambda r: r.status >= 400 and self.errors.append(f"HTTP {r.status} {r.url}"))

    def open(self, path, status=200):
        response = self.page.goto(self.base + path)
        assert response.status == status, (path, response.status)
        _check_header(response, self.base)
        return response

    def settle(self, path):
        """Let the page's scripts run (charts drawn, sockets open), then collect what went wrong."""
        page = self.page
        if page.locator("[data-chart], .chart, #charts, .chart-panel").count():
            page.wait_for_selector(".main-svg", timeout=15000)
        page.wait_for_load_state("load")
        page.wait_for_timeout(300)
        violations = page.evaluate("window.__csp || []")
        found = [f"{path}: {v}" for v in violations] + [f"{path}: {e}" for e in self.errors]
        self.errors.clear()
        return found

    def login(self, user, password):
        """Submit the login form; returns the response to the POST."""
        self.open("/login/")
        self.page.fill("#id_username", user)
        self.page.fill("#id_password", password)
        with self.page.expect_navigation() as answer:
            self.page.click("button[type=submit]")
        return answer.value


# Every main page and the admin's, each carrying the policy with no console error, page error or violation:
# checked in tests/live/test_phone_browser.py's sweep of every page (test_every_page_fits_a_phone…), in the
# same visits as its width check, with this module's recorder (RECORD_VIOLATIONS) and header check.


def test_login_and_lockout_pages_pass_the_policy(everything, web, browser, viewer):
    tab = Tab(browser, web)
    for _ in range(4):
        tab.login("vera", "wrong-password")
        assert "did not match" in tab.page.content()
    response = tab.login("vera", "wrong-password")
    assert response.status == 429
    _check_header(response, web)
    locked = tab.page.locator("#locked-out")
    assert "Account locked" in locked.inner_text() and "15 minutes" in locked.inner_text()
    problems = tab.settle("/login/ (locked)")
    # The 429 itself is expected (and Chromium logs it as "Failed to load resource … 429").
    problems = [p for p in problems if "status of 429" not in p and not p.endswith(f"HTTP 429 {web}/login/")]
    assert problems == [], "\n".join(problems)
