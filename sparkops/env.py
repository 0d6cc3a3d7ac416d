"""Strict environment parsers: a bad value stops start-up with a message naming the variable."""

import contextlib
import math
import os
import secrets
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_N = TypeVar("_N", int, float)


def env_str(name: str, default: str = "") -> str:
    """A string from NAME, or from the file named by NAME_FILE (for secrets)."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={path!r} cannot be read: {exc.strerror}") from exc
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_number(
    name: str,
    default: _N,
    cast: Callable[[str], Any] = int,
    minimum: float | None = None,
    maximum: float | None = None,
) -> _N:
    """A number from NAME (DEFAULT when unset or blank): a finite CAST within [MINIMUM, MAXIMUM], or
    ImproperlyConfigured naming the variable. "nan" and "inf" are floats, but no interval, limit or
    timeout: a poll interval of nan is never due again."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = cast(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a valid {cast.__name__}") from None
    if not math.isfinite(value):
        raise ImproperlyConfigured(f"{name}={raw!r} is not a finite number")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be at most {maximum}")
    return value


def env_list(name: str, default: Iterable[str] = ()) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def generated_secret_key(path: str | Path) -> str:
    """Read the key kept at PATH, creating it (random, mode 0600) the first time.

    The stack's processes start together and each reads its settings, so the key is written whole
    to a private file first and then linked into place (link fails if another process won): a
    reader never sees a file half written, and every process ends with the one key that landed.
    """

    path = Path(path)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".secret_key.", dir=path.parent)  # mode 0600
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(50))
            with contextlib.suppress(FileExistsError):  # another process's key landed first: it is the one
                os.link(tmp, path)
        finally:
            os.unlink(tmp)
    key = path.read_text().strip()
    if not key:
        raise ImproperlyConfigured(f"{path} is empty: remove it and a new key is made, or set SECRET_KEY")
    return key
