"""The manual at /docs/: the MkDocs site `make docs` builds into site/ (a wheel carries it as
sparkops/docs_site), served by SparkOps itself, so a box on a LAN without internet still has its
manual and every cause, check and command on the dashboard can link to its section.

It needs no login, as the static files do not: it is the project's public documentation. Material
for MkDocs writes a few inline scripts into each page (its palette, the search's scope); the page's
Content-Security-Policy allows exactly those, by their hashes, and nothing else."""

from __future__ import annotations

import base64
import hashlib
import re
from functools import lru_cache
from pathlib import Path

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpRequest, HttpResponseBase, HttpResponseRedirect
from django.shortcuts import render
from django.utils._os import safe_join
from django.views import static

import sparkops

INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)


def docs_root() -> Path | None:
    """The built site: a checkout's site/, else the one the wheel carries; None when neither was built."""
    for candidate in (Path(settings.BASE_DIR) / "site", Path(sparkops.__file__).resolve().parent / "docs_site"):
        if (candidate / "index.html").is_file():
            return candidate
    return None


@lru_cache(maxsize=256)
def _script_hashes(path: str, mtime_ns: int) -> tuple[str, ...]:  # noqa: ARG001 (the cache's key: a rebuilt page is read again)
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    digests = (hashlib.sha256(body.encode()).digest() for body in INLINE_SCRIPT.findall(text))
    return tuple(f"'sha256-{base64.b64encode(d).decode()}'" for d in digests)


@login_not_required
def docs_page(request: HttpRequest, path: str = "") -> HttpResponseBase:
    """One file of the built site; a directory is its index.html, as MkDocs links them."""
    root = docs_root()
    if root is None:
        return render(request, "dashboard/docs_missing.html", status=404)
    try:
        full = Path(safe_join(root, path))
        if full.is_dir():
            if path and not path.endswith("/"):
                return HttpResponseRedirect(request.path + "/")
            path = f"{path}index.html"
            full = full / "index.html"
        response: HttpResponseBase = static.serve(request, path, document_root=str(root))
    except (OSError, ValueError) as exc:  # a name too long for the file system; a NUL byte
        raise Http404("no such page in the manual") from exc
    # A 304 too: its headers replace the cached page's, so it must carry the same policy.
    if path.endswith(".html") and response.status_code in (200, 304):
        hashes = _script_hashes(str(full), full.stat().st_mtime_ns)
        if hashes:  # django-csp reads a response's _csp_update (its @csp_update decorator sets the same)
            setattr(response, "_csp_update", {"script-src": list(hashes)})  # noqa: B010
    return response
