"""Static files, compressed and cached for good.

`collectstatic` (run by `sparkops up`, the systemd migrate unit and the Docker build) writes
every file under a content-hashed name with Brotli and gzip copies beside it, and a manifest;
WhiteNoise then serves the hashed names with `Cache-Control: max-age=315360000, public,
immutable` and the smaller encoding the browser accepts. plotly.js (its "basic" partial bundle,
1.19 MB, 0.36 MB in Brotli, vendored as `static/vendor/`) is one of those files.

Without a current manifest (a checkout that never ran `up`, the tests, a static file edited
since the last collect) pages name the plain files, which WhiteNoise serves straight from the
finders, uncompressed and cached for a minute: never a page naming a file that is not there.
"""

import logging
import os
from collections.abc import Iterator
from typing import Any

import brotli
from django.contrib.staticfiles import finders
from django.core.management import call_command
from whitenoise.compress import Compressor
from whitenoise.middleware import WhiteNoiseMiddleware
from whitenoise.storage import CompressedManifestStaticFilesStorage

log = logging.getLogger(__name__)

# collectstatic's default ignore patterns: the sources a collect would copy.
IGNORE_PATTERNS = ["CVS", ".*", "*~"]
# Brotli's quality 9 makes plotly.js (1.19 MB) 357 KB in a tenth of a second; WhiteNoise's default
# (11) makes it 329 KB in about four, which every first `sparkops up` in a new var dir would wait for.
BROTLI_QUALITY = 9
# plotly.js's official "basic" partial bundle (scatter, bar, pie), vendored: every SparkOps chart is
# a scatter trace (lines, markers, error bars) with shapes and annotations, all in it; 1.2 MB to
# parse instead of the full bundle's 4.8 MB. `make vendor-plotly` fetches it again, sha256-pinned.
PLOTLY_STATIC = "vendor/plotly-basic-4.1.1.min.js"


class StaticMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise, without its warning at every start while STATIC_ROOT does not exist (it does
    not until the first collect): the finders serve the files meanwhile."""

    def add_files(self, root: str, prefix: str | None = None) -> None:
        if root == self.static_root and not os.path.isdir(root):
            return
        super().add_files(root, prefix)


class _Compressor(Compressor):
    @staticmethod
    def compress_brotli(data: bytes) -> bytes:
        return brotli.compress(data, quality=BROTLI_QUALITY)


class StaticStorage(CompressedManifestStaticFilesStorage):
    """WhiteNoise's compressed manifest storage that falls back to the plain names while its
    manifest is missing or out of date (see the module's docstring)."""

    manifest_strict = False

    def load_manifest(self) -> tuple[dict[str, Any], str]:
        paths, manifest_hash = super().load_manifest()
        if paths and not self._current(paths):
            log.warning(
                "static files changed since the last collectstatic: serving them uncompressed "
                "until `sparkops collectstatic` (or `sparkops up`) runs again"
            )
            return {}, ""
        return paths, manifest_hash

    def stored_name(self, name: str) -> str:
        if not self.hashed_files:
            return name
        try:
            return super().stored_name(name)
        except ValueError:  # not in the manifest, nor in STATIC_ROOT: the finders serve it
            return name

    def create_compressor(self, **kwargs: Any) -> Compressor:
        return _Compressor(**kwargs)

    def _current(self, paths: dict[str, str]) -> bool:
        try:
            collected_at = os.stat(self.path(self.manifest_name)).st_mtime
        except OSError:
            return False
        for name, path in source_files():
            hashed = paths.get(name)
            if hashed is None or os.stat(path).st_mtime > collected_at or not self.exists(hashed):
                return False
        return True


def source_files() -> Iterator[tuple[str, str]]:
    """(name, absolute path) of every file collectstatic would collect, first finder first."""
    seen = set()
    for finder in finders.get_finders():
        for path, storage in finder.list(IGNORE_PATTERNS):
            prefix = getattr(storage, "prefix", None)
            name = f"{prefix}/{path}" if prefix else path
            if name not in seen:
                seen.add(name)
                yield name.replace(os.sep, "/"), storage.path(path)


def collect_unless_current() -> bool:
    """collectstatic when the manifest is missing or out of date (`sparkops up` calls this before
    it starts the web server, which reads STATIC_ROOT once). True when it collected."""
    if StaticStorage().hashed_files:  # a fresh instance: the manifest as it is on disk now
        return False
    call_command("collectstatic", interactive=False, verbosity=0)
    return True
