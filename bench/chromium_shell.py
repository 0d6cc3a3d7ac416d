"""What the same pages cost Debian's Chromium headless shell and Debian's chromium in its headless mode.

The browser tests (tests/chromium.py) drive `chromium-headless-shell` where it is installed: the same
Blink and V8 as `chromium`, without the browser's own windows, as Playwright runs headless tests by
default. This serves two pages from a temporary directory on loopback: a chart drawn with the vendored
plotly.js (static/vendor/, the bundle every SparkOps chart page loads; 2,000 points) and a 200-row
table. Under each Chromium given it opens N browser contexts, as the tests' sessions do, loads each
page three times in each and takes a screenshot, and prints the CPU (user + system) of the whole
browser process tree and Playwright's driver, and the ratio to the first.

    .venv/bin/python bench/chromium_shell.py [--contexts 8] [--runs 2] [CHROMIUM ...]"""

import argparse
import functools
import http.server
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.chromium import ARGS, CANDIDATES  # noqa: E402

CHART = """<!doctype html><html><head><script src="{plotly}"></script></head><body><h1>chart</h1>
<div id="c" style="width:800px;height:400px"></div><script>
var xs = [], ys = []; for (var i = 0; i < 2000; i++) {{ xs.push(i); ys.push(Math.sin(i / 50)); }}
Plotly.newPlot('c', [{{x: xs, y: ys, type: 'scatter'}}]);</script></body></html>"""
TABLE = (
    "<!doctype html><html><body><h1>table</h1><table>"
    + "<tr><td>a</td><td>b</td></tr>" * 200
    + "</table></body></html>"
)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # one line per request would bury the figures
        pass


def tree_cpu():
    import psutil

    total = 0.0
    for proc in psutil.Process().children(recursive=True):
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return total + reaped.ru_utime + reaped.ru_stime


def one_run(executable, base, contexts):
    from playwright.sync_api import sync_playwright

    before = tree_cpu()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=ARGS)
        for _ in range(contexts):
            context = browser.new_context(viewport={"width": 1280, "height": 800})
            page = context.new_page()
            for _ in range(3):
                page.goto(base + "/chart.html")
                page.wait_for_selector(".main-svg")
                page.goto(base + "/table.html")
                page.wait_for_selector("h1")
            page.screenshot()
            context.close()
        browser.close()
    return tree_cpu() - before


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", type=int, default=8)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("chromiums", nargs="*", help=f"default: those of {', '.join(CANDIDATES)} installed")
    args = parser.parse_args()
    chromiums = args.chromiums or [c for c in CANDIDATES if Path(c).exists()]
    if not chromiums:
        sys.exit("no Chromium: apt-get install chromium-headless-shell chromium")
    site = Path(tempfile.mkdtemp(prefix="sparkops-chromium-bench-"))
    try:
        plotly = next((ROOT / "static" / "vendor").glob("plotly*.min.js"))
        shutil.copy(plotly, site / plotly.name)
        (site / "chart.html").write_text(CHART.format(plotly=plotly.name))
        (site / "table.html").write_text(TABLE)
        handler = functools.partial(_Quiet, directory=str(site))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        first = None
        for executable in chromiums:
            started = time.monotonic()
            cpu = statistics.median(one_run(executable, base, args.contexts) for _ in range(args.runs))
            first = first or cpu
            print(
                f"{executable:36s} {cpu:6.2f} s CPU ({args.contexts} contexts x 6 loads + a screenshot, "
                f"median of {args.runs})  x{cpu / first:.2f}  [{time.monotonic() - started:.0f} s]"
            )
        server.shutdown()
    finally:
        shutil.rmtree(site, ignore_errors=True)


if __name__ == "__main__":
    main()
