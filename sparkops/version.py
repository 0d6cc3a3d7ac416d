"""The installed package's version (importlib.metadata), for `sparkops --version` and the
HTTP user agent."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sparkops")
except PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "0+unknown"
