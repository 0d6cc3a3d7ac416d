"""One class per failure (see the README's Alerts section). REGISTRY maps rule key → instance."""

from .base import Rule

REGISTRY: dict[str, Rule] = {}


def register(cls):
    REGISTRY[cls.key] = cls()
    return cls


def rules_for(signal):
    return [rule for rule in REGISTRY.values() if rule.signal == signal]


from . import contract, engine, external, host, quality  # noqa: E402,F401  (registration)
