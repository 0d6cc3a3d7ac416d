"""What every measured kind's spec shares: plain data (a dataclass) that a run re-creates from its
stored config, the stable hash of the parameters that makes two runs comparable, and the fields
every kind's profile gives its spec (the engine, sampling, thinking, repetitions, timeout). Each
kind keeps its own fields, what its hash covers, and what it sends."""

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, ClassVar, Self


def stable_hash(data: Any) -> str:
    """16 hex digits of DATA as canonical JSON (keys sorted): the same parameters, the same hash."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


class MeasuredSpec:
    """A mixin for a kind's spec dataclass: `from_dict` of a run's stored parameters (keys it no
    longer has dropped) and `as_dict`, what a run stores."""

    if TYPE_CHECKING:
        __dataclass_fields__: ClassVar[dict[str, Any]]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        make: Any = cls  # the dataclass's own __init__, which the mixin cannot declare
        return make(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def profile_fields(profile: Any, *names: str) -> dict[str, Any]:
    """A kind's spec fields from its PROFILE: every kind's (its engine's name, kind and URL; sampling,
    its parameters, thinking, reps and timeout) and NAMES, the kind's own, as the profile has them."""
    engine = profile.engine
    return {
        "engine_name": engine.name,
        "engine_kind": engine.kind,
        "base_url": engine.base_url,
        "sampling": profile.sampling,
        "sampling_params": dict(profile.sampling_params or {}),
        "thinking": profile.thinking,
        "reps": profile.reps,
        "timeout_s": float(profile.timeout_s),
        **{name: getattr(profile, name) for name in names},
    }
