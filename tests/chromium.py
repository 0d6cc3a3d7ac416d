"""The Chromium every browser test drives, found once (Playwright's own browser download does not work
here, so it is Debian's).

Debian's headless shell (`chromium-headless-shell`: the same Blink and V8 as `chromium`, without the
browser's own windows) when it is installed, as Playwright runs its headless tests by default; else
Debian's `chromium` in its headless mode, which draws the whole browser around each page (its top
bars are WebUI pages, each with a renderer of its own). The same pages at the same sizes cost the
shell 0.42 of the CPU (8 contexts, each loading a Plotly chart page and a table page three times and
taking a screenshot: 3.4 s against 8.3 s of a core, Chromium 156; bench/chromium_shell.py).

A module whose subject is what the whole browser does that the shell does not sets
`FULL_BROWSER = True` and gets Debian's `chromium` (the shell answers every page's
`Notification.permission` with "denied" and shows no notification: the paging tests)."""

from pathlib import Path

import pytest

CANDIDATES = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")
CHROMIUM = next((path for path in CANDIDATES if Path(path).exists()), None)
FULL = CANDIDATES[1] if Path(CANDIDATES[1]).exists() else None
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
MISSING = "needs Debian's Chromium (apt-get install chromium-headless-shell, or chromium)"


def executable(full=False):
    """The Chromium to launch: the whole browser where FULL, else the fastest there is (None: none)."""
    return FULL if full else CHROMIUM


def skip_without_chromium(full=False):
    """At a browser test module's top: the module is skipped, saying how to get Chromium, without one."""
    if executable(full) is None:
        why = "needs Debian's chromium, the whole browser (apt-get install chromium)" if full else MISSING
        pytest.skip(why, allow_module_level=True)
