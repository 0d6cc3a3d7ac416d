"""One class per failure (each with its section in docs/alerts.md). REGISTRY maps rule key → instance."""

from typing import TypeVar

from .base import Rule

R = TypeVar("R", bound=type[Rule])

REGISTRY: dict[str, Rule] = {}


def register(cls: R) -> R:
    REGISTRY[cls.key] = cls()
    return cls


from . import contract, engine, external, host, quality  # noqa: E402,F401  (registration)
