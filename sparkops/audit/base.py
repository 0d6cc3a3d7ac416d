"""What every audit check is built on: the check interface, the result it returns, reading a
snapshot's unit, and the systemd drop-in a fix suggests (so the fix's line and the file written agree)."""

from __future__ import annotations

import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from dashboard.models import Engine

# One engine's latest configuration snapshot (ConfigSnapshot.data, parsed JSON), and a box's: [(engine, data)]
Data = dict[str, Any]
Snapshots = list[tuple["Engine", Data]]
# A check's finding for one engine: (status, evidence), or (status, evidence, fix); None: nothing to say
Verdict = tuple[str, str] | tuple[str, str, str] | None


@dataclass
class Result:
    check: str
    title: str
    subject: str  # an engine's name, or the box's
    status: str  # pass | warn | fail
    evidence: str
    fix: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Check:
    key = ""
    title = ""
    scope = "engine"  # "engine": once per engine; "box": once for the box's engines together
    DEFAULTS: ClassVar[dict] = {}
    BOUNDS: ClassVar[dict] = {}  # threshold -> dashboard.bounds.Bounds for numbers; text: thresholds.STRING_MAX
    fix = ""

    def run(self, snapshots: Snapshots, *, settings: dict[str, Any]) -> list[Result]:
        """SNAPSHOTS: [(engine, data)] of one box. Returns a list of Result."""
        if self.scope == "box":
            return self.box(snapshots, settings)
        out = []
        for engine, data in snapshots:
            res = self.engine(engine, data, settings)
            if res is not None:
                status, evidence, fix = (*res, self.fix) if len(res) == 2 else res  # a fix of its own: commands
                out.append(Result(self.key, self.title, engine.name, status, evidence, "" if status == "pass" else fix))
        return out

    def engine(  # pragma: no cover - per check
        self, engine: Engine, data: Data, settings: dict[str, Any]
    ) -> Verdict:
        """(status, evidence), or (status, evidence, fix) where the fix names ENGINE's own unit."""
        raise NotImplementedError

    def box(self, snapshots: Snapshots, settings: dict[str, Any]) -> list[Result]:  # pragma: no cover - per check
        raise NotImplementedError


def systemctl_for(engine: Engine) -> str:
    """The systemctl an operator types for ENGINE's unit: `systemctl --user` for a user unit."""
    return "systemctl --user" if getattr(engine, "unit_scope", "") == "user" else "sudo systemctl"


def sparkops_executable() -> str:
    """The sparkops console script of this installation, by absolute path: systemd runs an Exec*=
    line only from an absolute path (a bare `sparkops` fails the start with 203/EXEC)."""
    mine = Path(sys.executable).parent / "sparkops"
    if mine.exists():
        return str(mine)
    found = shutil.which("sparkops")
    return found or f"{sys.executable} -m sparkops.cli"


def unit_of(data: Data) -> dict[str, Any]:
    return (data or {}).get("unit") or {}


def file_note(data: Data, directive: str) -> str:
    path = (unit_of(data).get("directive_files") or {}).get(directive)
    return f" ({path})" if path else ""


@dataclass(frozen=True)
class DropIn:
    """A systemd drop-in a check's fix suggests: its file name and its settings, section by section. The
    one source of that text: the audit's fix says it in a line, the down card's command writes the file."""

    name: str
    sections: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]

    @property
    def text(self) -> str:
        """The file, as written under UNIT.d/."""
        return "\n".join(
            f"[{section}]\n" + "".join(f"{key}={value}\n" for key, value in settings)
            for section, settings in self.sections
        )

    def inline(self) -> str:
        """The file in one line: "[Unit] A=1, B=2; [Service] C=3"."""
        return "; ".join(
            f"[{section}] " + ", ".join(f"{key}={value}" for key, value in settings)
            for section, settings in self.sections
        )
