"""Rules of the quality module (registered on import by rules/__init__.py)."""

from . import register  # noqa: F401
from .base import Rule  # noqa: F401
