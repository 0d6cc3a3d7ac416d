"""First visit to an engine page (a chart page: plotly.js and the project's CSS and JS), on
loopback, in headless Chromium with an empty cache: the time to the page's load event (plotly.js
and the charts' scripts are `defer`, so they have run by then), its first contentful paint, and
the bytes that crossed the wire, before and after `collectstatic` (issue 30 §6, target ≤ 500 ms).

    .venv/bin/python bench/first_chart_visit.py [--visits 5]

"plain" is a checkout that never collected (the finders' files, uncompressed); "collected" is
what `sparkops up` serves (hashed names, Brotli, immutable). Each visit is a fresh browser
context (no cache) holding a logged-in session. SQLite and a private Redis in a temporary
var dir; nothing of the checkout's own var/ is touched."""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sparkops.webproc import start_web, stop_web

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
USER, PASSWORD = "bench", "bench-password-1234"

TIMING_JS = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const res = performance.getEntriesByType('resource');
  const plotly = res.find(r => r.name.includes('/plotly'));
  const fcp = performance.getEntriesByName('first-contentful-paint')[0];
  return {
    load_ms: nav.loadEventEnd,
    fcp_ms: fcp ? fcp.startTime : null,
    html_ms: nav.responseEnd,
    plotly_ms: plotly ? plotly.responseEnd - plotly.startTime : null,
    bytes: nav.transferSize + res.reduce((n, r) => n + r.transferSize, 0),
    requests: 1 + res.length,
    plotly_wire: plotly ? plotly.transferSize : null,
    plotly_body: plotly ? plotly.decodedBodySize : null,
  };
}"""


def manage(env, *args, stdin=None):
    subprocess.run([PY, "manage.py", *args], cwd=ROOT, env=env, check=True, input=stdin, stdout=subprocess.DEVNULL)


def visits(browser, base, n):
    login = browser.new_context()
    page = login.new_page()
    page.goto(base + "/login/")
    page.fill("#id_username", USER)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit], input[type=submit]")
    page.wait_for_url(lambda url: "/login/" not in url)
    cookies = login.cookies()
    login.close()
    results = []
    for _ in range(n + 1):  # the first warms the server (templates, imports), not the browser
        context = browser.new_context()
        context.add_cookies(cookies)
        page = context.new_page()
        page.goto(base + "/engines/bench-vllm/", wait_until="load")
        results.append(page.evaluate(TIMING_JS))
        context.close()
    return results[1:]


def measure(env, browser, n):
    proc, base = start_web(env=env, cwd=ROOT)
    try:
        return visits(browser, base, n)
    finally:
        stop_web(proc)


def report(name, rows):
    loads = [r["load_ms"] for r in rows]
    fcps = [r["fcp_ms"] for r in rows if r["fcp_ms"] is not None]
    fcp = f"median {statistics.median(fcps):.0f} ms" if fcps else "not reported"
    first = rows[0]

    def median(key):
        return statistics.median(r[key] for r in rows)

    print(
        f"{name:<10} load event median {median('load_ms'):5.0f} ms (min {min(loads):.0f}, max {max(loads):.0f}, "
        f"{len(loads)} visits; the page's HTML in {median('html_ms'):.0f} ms, plotly.js fetched in "
        f"{median('plotly_ms'):.0f} ms, the rest is the browser running it); first contentful paint "
        f"{fcp}\n"
        f"{'':<10} {first['bytes'] / 1e6:.2f} MB over the wire in {first['requests']} requests; "
        f"plotly.js {first['plotly_wire'] / 1e6:.2f} MB for {first['plotly_body'] / 1e6:.2f} MB"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visits", type=int, default=5)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    from sparkops.redisproc import PrivateRedis

    var = Path(tempfile.mkdtemp(prefix="sparkops-bench-static-"))
    redis = PrivateRedis()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SPARKOPS_TEST_DB_NAME", "STATIC_ROOT")}
    env.update(SPARKOPS_VAR_DIR=str(var), DJANGO_SETTINGS_MODULE="sparkops.settings", REDIS_URL=redis.start())
    try:
        manage(env, "migrate", "--noinput", "-v0")
        (var / "pw").write_text(PASSWORD)
        manage(env, "user", "add", USER, "--role", "viewer", "--password-file", str(var / "pw"))
        manage(env, "engine", "add", "bench-vllm", "--kind", "vllm", "--url", "http://127.0.0.1:9")
        print(
            f"first visit to /engines/bench-vllm/ on loopback, headless Chromium, load average {os.getloadavg()[0]:.1f}"
        )
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            report("plain", measure(env, browser, args.visits))
            started = time.monotonic()
            manage(env, "collectstatic", "--noinput", "-v0")
            print(f"collectstatic: {time.monotonic() - started:.1f} s")
            report("collected", measure(env, browser, args.visits))
            browser.close()
    finally:
        redis.stop(timeout=1.0)


if __name__ == "__main__":
    main()
