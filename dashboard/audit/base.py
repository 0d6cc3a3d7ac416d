"""What every audit check is built on: the check interface, the result it returns, reading a
snapshot's unit, and the systemd drop-in a fix suggests (so the fix's line and the file written agree)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar


@dataclass
class Result:
    check: str
    title: str
    subject: str  # an engine's name, or the box's
    status: str  # pass | warn | fail
    evidence: str
    fix: str = ""

    def as_dict(self):
        return asdict(self)


class Check:
    key = ""
    title = ""
    scope = "engine"  # "engine": once per engine; "box": once for the box's engines together
    DEFAULTS: ClassVar[dict] = {}
    BOUNDS: ClassVar[dict] = {}  # threshold -> dashboard.bounds.Bounds for numbers; text: thresholds.STRING_MAX
    fix = ""

    def run(self, snapshots, *, settings):
        """SNAPSHOTS: [(engine, data)] of one box. Returns a list of Result."""
        if self.scope == "box":
            return self.box(snapshots, settings)
        out = []
        for engine, data in snapshots:
            res = self.engine(engine, data, settings)
            if res is not None:
                status, evidence = res
                out.append(
                    Result(self.key, self.title, engine.name, status, evidence, "" if status == "pass" else self.fix)
                )
        return out

    def engine(self, engine, data, settings):  # pragma: no cover - per check
        raise NotImplementedError

    def box(self, snapshots, settings):  # pragma: no cover - per check
        raise NotImplementedError


def unit_of(data):
    return (data or {}).get("unit") or {}


def file_note(data, directive):
    path = (unit_of(data).get("directive_files") or {}).get(directive)
    return f" ({path})" if path else ""


@dataclass(frozen=True)
class DropIn:
    """A systemd drop-in a check's fix suggests: its file name and its settings, section by section. The
    one source of that text: the audit's fix says it in a line, the down card's command writes the file."""

    name: str
    sections: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]

    @property
    def text(self):
        """The file, as written under UNIT.d/."""
        return "\n".join(
            f"[{section}]\n" + "".join(f"{key}={value}\n" for key, value in settings)
            for section, settings in self.sections
        )

    def inline(self):
        """The file in one line: "[Unit] A=1, B=2; [Service] C=3"."""
        return "; ".join(
            f"[{section}] " + ", ".join(f"{key}={value}" for key, value in settings)
            for section, settings in self.sections
        )
