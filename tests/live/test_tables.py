"""Issue 30 §3 and §4 in real headless Chromium, at a desk (1280×800) and on a phone (390×844).

Tables: every table on every page that has one, each seeded with rows, is measured in the page itself.
No cell is narrower than its longest word (the word's own width, measured beside it with the cell's
font, letter spacing and text transform), no table overflows a box that does not scroll, a table wider
than its box scrolls inside it with a cue at the scroll edge, and a badge never wraps.

Audit pills: fail, warn and pass differ in more than colour (a glyph of their own, a border of their own)."""

import pytest

from tests.test_csp_browser import everything  # noqa: F401 — fixture: one of each thing the pages show

from .test_browser import browser  # noqa: F401 — the module's Chromium
from .test_phone_browser import SIZES, SizedSession, _settled, web  # noqa: F401 — fixtures

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# One pass over the page's tables; returns a list of sentences, one per fault (empty: the page is fine).
# A word is what Unicode calls one (UAX #29, Intl.Segmenter): "NAME", "demo", "2026", "COMPLETION"; a line may
# still break at a hyphen or inside a JSON blob, never inside a word. A probe span appended beside each word's
# text inherits its font, letter spacing and text transform and never wraps: its width is the word's own. All
# probes go in before any is read (one layout, not one a word).
MEASURE_TABLES = r"""() => {
  const where = el => {
    const t = el.closest('table');
    const name = t.id ? '#' + t.id : 'table.' + (String(t.className).trim().split(/\s+/).join('.') || '(no class)');
    const cell = el.closest('td, th');
    return name + (cell ? ' ' + cell.tagName.toLowerCase() + '[' + cell.cellIndex + ']' : '');
  };
  const shown = el => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden';
  const faults = [];
  const probes = [];
  const words = new Intl.Segmenter('en', {granularity: 'word'});  // Unicode's word boundaries (UAX #29)
  for (const cell of document.querySelectorAll('td, th')) {
    if (!shown(cell)) continue;
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const parent = node.parentElement;
      if (!shown(parent) || parent.closest('td, th') !== cell) continue;  // a nested table's cells are their own
      for (const {segment: word, isWordLike} of words.segment(node.data)) {
        if (!isWordLike) continue;
        const probe = document.createElement('span');
        probe.textContent = word;
        probe.style.position = 'absolute';
        probe.style.whiteSpace = 'pre';
        probe.style.visibility = 'hidden';
        probe.style.left = '0';
        probe.style.top = '0';
        parent.appendChild(probe);
        probes.push([cell, word, probe]);
      }
    }
  }
  const widest = new Map();
  for (const [cell, word, probe] of probes) {
    const width = probe.getBoundingClientRect().width;
    if (!widest.has(cell) || widest.get(cell)[1] < width) widest.set(cell, [word, width]);
  }
  for (const [, , probe] of probes) probe.remove();
  for (const [cell, [word, width]] of widest) {
    const style = getComputedStyle(cell);
    // collapsed borders: half of each lies inside the cell's box (CSS 2.1 §17.6.2)
    const share = getComputedStyle(cell.closest('table')).borderCollapse === 'collapse' ? 0.5 : 1;
    const room = cell.getBoundingClientRect().width - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight)
      - share * (parseFloat(style.borderLeftWidth) + parseFloat(style.borderRightWidth));
    if (room + 0.5 < width)
      faults.push(`${where(cell)}: "${word}" is ${width.toFixed(1)} px, its cell has ${room.toFixed(1)} px`);
  }
  for (const table of document.querySelectorAll('table')) {
    if (!shown(table)) continue;
    let box = table;  // the nearest box that clips or scrolls: the table itself (display:block) or an ancestor
    while (box.parentElement && box !== document.body && getComputedStyle(box).overflowX === 'visible') box = box.parentElement;
    const scrolls = ['auto', 'scroll'].includes(getComputedStyle(box).overflowX);
    if (box === document.body) {
      const right = table.getBoundingClientRect().right;
      if (right > document.documentElement.clientWidth + 1)
        faults.push(`${where(table)}: ends at ${right.toFixed(0)} px, past the page (${document.documentElement.clientWidth} px), in no scroll box`);
    } else if (box.getBoundingClientRect().right > document.documentElement.clientWidth + 1) {
      faults.push(`${where(table)}: its scroll box (${box.tagName.toLowerCase()}.${box.className}) ends at ${box.getBoundingClientRect().right.toFixed(0)} px, past the page (${document.documentElement.clientWidth} px)`);
    } else if (box.scrollWidth > box.clientWidth + 1) {
      if (!scrolls)
        faults.push(`${where(table)}: ${box.scrollWidth} px cut to ${box.clientWidth} px by a box that does not scroll (${box.tagName.toLowerCase()}.${box.className})`);
      else if (!getComputedStyle(box).backgroundAttachment.includes('local'))
        faults.push(`${where(table)}: scrolls (${box.scrollWidth} px in ${box.clientWidth} px) with no cue at its edge`);
    }
  }
  for (const badge of document.querySelectorAll('.badge, .mark, .kind, td [class*="status"]')) {
    if (!shown(badge)) continue;
    const range = document.createRange();
    range.selectNodeContents(badge);
    const tops = new Set(Array.from(range.getClientRects()).filter(r => r.width > 0).map(r => Math.round(r.top)));
    if (tops.size > 1) faults.push(`${where(badge.closest('table') ? badge : document.body)}: the badge "${badge.textContent.trim()}" wraps onto ${tops.size} lines`);
  }
  return faults;
}"""

# The same JS, run outside any table (where() needs a table): badges elsewhere name the page only.
MEASURE_TABLES = MEASURE_TABLES.replace(
    "const t = el.closest('table');", "const t = el.closest('table') || {id: '', className: 'none (page)'};"
)


def _seed_the_rest(everything, admin_user):
    """What `everything` and the measured objects leave out: claims, API tokens, a launch configuration
    (the audit's fail, warn and pass), an incident's change-log link, a delivery on the firing alert."""
    from django.utils import timezone

    from dashboard.models import Incident
    from dashboard.tokens.models import ApiToken
    from sparkops.alerts.models import Delivery
    from sparkops.changelog.models import Claim, Entry

    fleet, now = everything["fleet"], timezone.now()
    vllm, llama = fleet["vllm"], fleet["llama"]
    body = (  # a Markdown table in an entry: the change log renders it (.md table)
        "Measured after the restart.\n\n| engine | --gpu-memory-utilization | KV pool (tokens) | concurrency | note |\n"
        "| --- | --- | --- | --- | --- |\n| vllm-main | 0.7 | 412,000 | 6.3× | after-restart measurement |\n"
    )
    entry = Entry.objects.create(
        effective_at=now, kind="claim", title="KV pool after --gpu-memory-utilization 0.7", body_md=body
    )
    entry.engines.add(vllm)
    Claim.objects.create(
        entry=entry,
        text="The pool holds 412,000 tokens at 0.8 of the box",
        metric="pool_tokens",
        predicted=412000,
        window=65536,
        engine=vllm,
    )
    Claim.objects.create(entry=entry, text="llama-side restarts within its budget", position=1)
    ApiToken.issue(admin_user, name="prometheus-scraper")
    revoked, _ = ApiToken.issue(admin_user, name="grafana-dashboard")
    revoked.revoke()
    Incident.objects.get().changelog_entries.add(entry)
    Delivery.objects.create(
        event=everything["alert"],
        channel=fleet["email"],
        transition="firing",
        idempotency_key=f"table-test-{everything['alert'].pk}",
        status="failed",
        attempts=2,
        next_attempt_at=now,
        created_at=now,
        last_error="SMTP 451 4.7.1 try again later",
    )
    for engine in (vllm, llama):
        _snapshot(engine, now)
    return entry


def _snapshot(engine, now):
    from dashboard.models import ConfigSnapshot
    from tests.launchconfig.test_thresholds import ENV

    data = {"unit": {"unit": engine.unit, "restart": "on-failure"}, "environment": ENV, "flags": {"flags": {}}}
    ConfigSnapshot.objects.create(engine=engine, observed_at=now, hash=f"{engine.pk:064d}", data=data)


def _pages(everything, made):
    fleet, runs = everything["fleet"], everything["runs"]
    llama, host = fleet["llama"], fleet["host"]
    probe_runs = made["probe_runs"]
    return {
        "engines": "/engines/",
        "engine-contract": "/engines/sim-a/",
        "host": f"/hosts/{host.name}/",
        "host-audit": f"/hosts/{host.name}/audit/",
        "engine-audit": f"/engines/{llama.name}/audit/",
        "launch": f"/engines/{llama.name}/launch/",
        "alerts": "/alerts/",
        "alert": f"/alerts/{everything['alert'].pk}/",
        "channels": "/alerts/channels/",
        "silences": "/alerts/silences/",
        "rules": "/alerts/rules/",
        "claims": "/changelog/claims/",
        "ledgers": "/changelog/ledgers/",
        "tokens": "/account/tokens/",
        "bench": "/bench/",
        "bench-profile": f"/bench/profiles/{everything['profile'].pk}/",
        "bench-run": f"/bench/runs/{runs[0].pk}/",
        "rate-run": f"/bench/runs/{made['rate_run'].pk}/",
        "sweep-run": f"/bench/runs/{made['sweep'].cells.order_by('pk').first().pk}/",
        "compare": f"/bench/compare/?a={runs[0].pk}&b={runs[1].pk}",
        "sweep": f"/bench/sweeps/{made['sweep'].pk}/",
        "probes": "/probes/",
        "probe-profile": f"/probes/profiles/{probe_runs['needle'].profile_id}/",
        **{f"probe-{kind}": f"/probes/runs/{run.pk}/" for kind, run in probe_runs.items()},
        "experiments": "/experiments/",
        "experiment-new": "/experiments/new/",  # a form's own table (form.as_table) is measured like any other
        "bench-profile-new": "/bench/profiles/new/",
        "sweep-new": "/bench/sweeps/new/",
        "rate-new": "/bench/rate/new/",
        "probe-new": "/probes/profiles/new/",
        "experiment": f"/experiments/{made['experiment'].pk}/",
    }


# The pages issue 22 added, each with objects measured against simulated engines: none scrolls sideways at
# either size, and each is photographed as new-SHOT once its charts have drawn. The sweep's name: SHOT; each
# probe run's page is one too (probe-KIND: probe-run-KIND).
NEW_PAGES = {
    "planner": "planner",
    "probes": "probes",
    "probe-new": "probe-new",
    "probe-profile": "probe-profile-needle",
    "bench": "bench-with-sweeps",
    "sweep": "sweep",
    "sweep-new": "sweep-new",
    "rate-new": "rate-new",
    "rate-run": "rate-run",
    "experiments": "experiments",
    "experiment": "experiment-done",
    "experiment-waiting": "experiment-waiting",
    "experiment-new": "experiment-new",
    "host-audit": "host-audit-thresholds",
    "engine-contract": "engine-contract-panels",
}
NO_TABLE = {"planner", "experiment-waiting"}  # in the sweep for their width only


def test_every_table_fits_stacks_or_scrolls_with_a_cue_and_no_word_breaks_and_the_new_pages_fit_at_both_sizes(
    everything,
    web,
    browser,
    admin_user,
):
    """Each page once per size, seeded with real objects (tests/test_crawl.py build_measured: planner, probes,
    sweeps, rate runs, experiments, the audit thresholds and the engine page's two contract panels): every
    table measured; the new pages (NEW_PAGES) neither scroll sideways at 390×844 nor at 1280×800."""
    from concurrent.futures import ThreadPoolExecutor

    from dashboard.models import Engine
    from tests.test_crawl import READING, build_measured

    from .test_phone_browser import LIVE_CONTRACT, OVERFLOWING, _no_sideways_scroll

    host = everything["fleet"]["host"]

    def measured():  # in a thread of its own: Playwright's event loop holds this one, the probes run their own
        from django.db import connection

        try:
            return build_measured(host, admin_user)
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        made = pool.submit(measured).result()
    Engine.objects.filter(name="sim-a").update(latest={**READING, "window": 32768, "contract": LIVE_CONTRACT})
    entry = _seed_the_rest(everything, admin_user)
    pages = {
        **_pages(everything, made),
        "entry": f"/changelog/{entry.pk}/",
        "planner": f"/planner/{host.name}/",
        "experiment-waiting": f"/experiments/{made['waiting'].pk}/",
    }
    new_pages = NEW_PAGES | {f"probe-{kind}": f"probe-run-{kind}" for kind in made["probe_runs"]}
    assert set(new_pages) <= set(pages), set(new_pages) - set(pages)
    faults, errors, wide, tables = [], [], [], 0
    for size in SIZES:
        session = SizedSession(browser, web.base, admin_user, size)
        page = session.page
        for name, path in pages.items():
            response = page.goto(web.base + path)
            assert response.status == 200, (path, response.status)
            if name in new_pages and page.locator("#charts .chart, .chart[data-chart], .js-plotly-plot").count():
                page.wait_for_selector(".main-svg", timeout=15000)  # drawn: measured at its real width
            _settled(page)
            if name not in NO_TABLE:
                rows = page.evaluate("document.querySelectorAll('table tbody tr').length")
                assert rows, f"{path}: no table rows to measure"
            tables += page.evaluate("document.querySelectorAll('table').length")
            faults += [f"{size} {path} {fault}" for fault in page.evaluate(MEASURE_TABLES)]
            if name in SHOT:
                session.shot(f"tables-{name}")
            if name in new_pages:
                session.shot(f"new-{new_pages[name]}")
                if not _no_sideways_scroll(page):
                    wide.append(f"{size} {path}: {page.evaluate(OVERFLOWING)}")
            if name == "engine-contract":
                assert page.locator("#contract-live #contract-finished").count() == 1  # the live panel, its shares
        errors += session.errors
        session.context.close()
    assert tables > 2 * len(pages), tables
    faults = list(dict.fromkeys(faults))  # a fault repeated row after row, once
    assert faults == [], f"{len(faults)} faults:\n" + "\n".join(faults[:100])
    assert wide == [], "\n".join(wide)
    assert not errors, errors


SHOT = {
    "entry",
    "launch",
    "engines",
    "alerts",
    "silences",
    "ledgers",
    "claims",
    "tokens",
    "rate-run",
    "probe-needle",
    "bench",
    "host-audit",
}

# Each pill's look, as the eye gets it: the glyph before its text, its border and its fill.
PILL_LOOK = """() => Array.from(document.querySelectorAll('table.audit td .badge')).map(b => {
  const s = getComputedStyle(b), before = getComputedStyle(b, '::before');
  return {status: b.textContent.trim(), glyph: before.content, border: s.borderStyle + ' ' + s.borderTopWidth,
          fill: s.backgroundColor, color: s.color, weight: s.fontWeight, lines: b.getClientRects().length};
})"""


def _luminance(rgb):
    import re

    channels = [int(c) / 255 for c in re.findall(r"\d+", rgb)[:3]]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(a, b):
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_audit_fail_warn_and_pass_pills_differ_in_glyph_and_border_not_colour_alone(web, fleet, browser, viewer):
    from django.utils import timezone

    from sparkops.audit.run import audit_host

    host, now = fleet["host"], timezone.now()
    for engine in (fleet["vllm"], fleet["llama"]):
        _snapshot(engine, now)
    assert {r.status for r in audit_host(host)} == {"fail", "warn", "pass"}  # all three on the page
    for size in SIZES:
        session = SizedSession(browser, web.base, viewer, size)
        page = session.page
        page.goto(f"{web.base}/hosts/{host.name}/audit/")
        _settled(page)
        looks = {}
        for look in page.evaluate(PILL_LOOK):
            looks.setdefault(look["status"], look)
            assert look["lines"] == 1, look
        assert set(looks) == {"fail", "warn", "pass"}, looks
        glyphs = {status: look["glyph"] for status, look in looks.items()}
        assert len(set(glyphs.values())) == 3 and "none" not in glyphs.values(), glyphs  # a glyph each
        borders = {status: look["border"] for status, look in looks.items()}
        assert len(set(borders.values())) == 3, borders  # a shape each, seen without colour
        for theme in ("light", "dark"):
            page.evaluate(f"document.documentElement.dataset.theme = '{theme}'")
            card = page.evaluate("getComputedStyle(document.querySelector('.table-scroll')).backgroundColor")
            for look in page.evaluate(PILL_LOOK):
                backdrop = look["fill"] if not look["fill"].endswith(", 0)") else card
                assert _contrast(look["color"], backdrop) >= 4.5, (theme, look)
            session.shot(f"audit-pills-{theme}")
        assert not session.errors, session.errors
        session.context.close()
