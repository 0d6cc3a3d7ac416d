"""Every measured kind this process has declared, by label. A kind's app declares its `Kind` when
Django starts (its AppConfig.ready imports its kind.py), so every process knows every kind. The core
reads them here to ask across kinds (is a run of any kind running on this engine?) without naming
one; kinds.py, which declares them, sits above this module, and conditions.py beside it."""

from typing import Any, Protocol


class Registered(Protocol):
    """What the core reads of a registered kind (a `kinds.Kind`)."""

    @property
    def label(self) -> str: ...

    @property
    def what(self) -> str: ...

    @property
    def run_model(self) -> Any: ...


KINDS: dict[str, Registered] = {}
