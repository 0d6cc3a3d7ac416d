"""`sparkops unit fix`: the launch audit's mechanical fixes, each one drop-in, shown before written.

For every check of an engine that is not passing and has a mechanical fix, `plan` builds the
drop-in it needs (`50-sparkops-<check>.conf`, one file per check) and its unified diff against what
the file holds now. `apply` writes them into the unit's drop-in directory, runs `daemon-reload`
(`--user` for user units) and observes the unit again with the launch observer, so the change log
gets the observed entry naming each setting and the drop-in that set it: the log writes itself.

The unit file itself is never touched. Where no drop-in can be written — no unit, a unit systemd
does not know, a transient unit (`systemd-run`), one generated or under /run, a directory that
cannot be written — the whole plan is refused with the reason and nothing is changed.

Where the drop-in goes is asked of systemd (`FragmentPath`, `DropInPaths`, `Transient`), not
guessed: beside the fragment when it lives in a configuration directory, in the scope's own
configuration directory (/etc/systemd/system, $XDG_CONFIG_HOME/systemd/user) when the fragment is
a vendor file under /usr/lib or /lib."""

from __future__ import annotations

import difflib
import os
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from django.conf import settings
from django.utils import timezone

from sparkops.audit.checks import CHECKS
from sparkops.audit.run import audit, snapshots_of
from sparkops.audit.thresholds import effective_thresholds
from sparkops.collectors.command import CommandError, run
from sparkops.collectors.unitconfig import _systemctl, show
from sparkops.controls.unitfix_checks import Setting, engine_settings, ordering_settings, overridden

PREFIX = "50-sparkops-"
LOCATE_PROPERTIES = ("Id", "LoadState", "FragmentPath", "DropInPaths", "Transient")
VENDOR_DIRS = ("/usr/lib/systemd/", "/lib/systemd/", "/usr/local/lib/systemd/", "/usr/share/systemd/")
RUNTIME_DIRS = ("/run/", "/var/run/")


if TYPE_CHECKING:
    from dashboard.models import Engine


class Skipped(TypedDict):
    """A check the plan writes nothing for, and why."""

    check: str
    status: str
    why: str


class EntryRef(TypedDict):
    """The observed change-log entry a fix wrote."""

    id: int
    title: str
    url: str


class Refused(Exception):
    """No drop-in can be written for this unit; the message says why."""


@dataclass
class Fix:
    check: str
    status: str  # the audit's: fail | warn (an "applied" one is skipped: it waits for a restart)
    file: str  # 50-sparkops-<check>.conf
    path: str  # where it goes, as systemd names it
    settings: list[Setting]  # [(section, key, value)] in the file's order
    before: str | None = None  # what the file holds now (None: no such file)
    note: str = ""
    applied: bool = False

    @property
    def text(self) -> str:
        return render(self.check, self.settings, self.note)

    @property
    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(
                (self.before or "").splitlines(keepends=True),
                self.text.splitlines(keepends=True),
                fromfile=self.path if self.before is not None else "/dev/null",
                tofile=self.path,
            )
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "status": self.status,
            "file": self.file,
            "path": self.path,
            "diff": self.diff,
            "settings": [{"section": s, "key": k, "value": v} for s, k, v in self.settings],
            "note": self.note,
            "applied": self.applied,
        }


@dataclass
class Plan:
    engine: str
    unit: str
    scope: str
    dropin_dir: str = ""
    fixes: list[Fix] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    refused: str | None = None
    applied: bool = False
    daemon_reload: str | None = None  # "done" or the error
    entry: EntryRef | None = None  # the observed change-log entry

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["fixes"] = [f.as_dict() for f in self.fixes]
        return out


def render(check: str, items: list[Setting], note: str = "") -> str:
    """A drop-in's text: a header saying what wrote it and why, then its sections in order."""
    title = CHECKS[check].title if check in CHECKS else check
    lines = [f"# Written by `sparkops unit fix` for the audit check {check}: {title}.", "# Remove this file and"]
    lines[-1] += " run `systemctl daemon-reload` to undo it."
    lines += [f"# {n}" for n in note.splitlines() if n]
    section = None
    for sect, key, value in items:
        if sect != section:
            lines += ["", f"[{sect}]"]
            section = sect
        lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"


def host_path(path: str | os.PathLike[str]) -> Path:
    """PATH as this box's process sees it (under SPARKOPS_HOST_ROOT: the simulator's "/")."""
    return Path(settings.SPARKOPS_HOST_ROOT) / str(path).lstrip("/")


# --- where the drop-ins go ----------------------------------------------------------------------


def unit_properties(engine: Engine) -> dict[str, str]:
    """What systemd says of ENGINE's unit now (this box's `systemctl show`); Refused when it cannot be asked."""

    try:
        return show([engine.unit], scope=engine.unit_scope, properties=LOCATE_PROPERTIES)[engine.unit]
    except CommandError as exc:
        raise Refused(f"systemd could not be asked about {engine.unit}: {exc}") from None


def snapshot_properties(data: Mapping[str, Any] | None) -> dict[str, str]:
    """The same properties from a stored snapshot (a preview away from the box)."""
    u = (data or {}).get("unit") or {}
    return {
        "Id": u.get("unit", ""),
        "LoadState": u.get("load_state") or "",
        "FragmentPath": u.get("fragment_path") or "",
        "DropInPaths": " ".join(u.get("drop_in_paths") or []),
        "Transient": "",
    }


def config_dir(scope: str) -> str:
    """The scope's own configuration directory, where an administrator's drop-ins belong."""
    if scope == "user":
        home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
        return os.path.join(home, "systemd", "user")
    return "/etc/systemd/system"


def dropin_dir(unit: str, scope: str, props: Mapping[str, str]) -> str:
    """The directory for UNIT's drop-ins, from what systemd says (PROPS); Refused with the reason."""
    load, fragment = props.get("LoadState") or "", props.get("FragmentPath") or ""
    if load != "loaded":
        raise Refused(f"{unit} is not a unit systemd knows (LoadState={load or 'not-found'}): no drop-in can apply")
    if props.get("Transient") == "yes" or "/transient/" in fragment:
        raise Refused(
            f"{unit} is a transient unit (made by systemd-run, {fragment or 'no file'}): "
            "it has no unit file, and a drop-in for it would vanish with it"
        )
    if not fragment:
        raise Refused(f"{unit} has no unit file (FragmentPath is empty): nothing a drop-in could amend")
    if fragment.startswith(RUNTIME_DIRS):
        raise Refused(f"{unit} is a runtime or generated unit ({fragment}): drop-ins beside it are gone at reboot")
    base = config_dir(scope) if fragment.startswith(VENDOR_DIRS) else os.path.dirname(fragment)
    return os.path.join(base, f"{unit}.d")


def writable(directory: str) -> str | None:
    """None when this process can create files in DIRECTORY (made if missing); else why not."""
    path = host_path(directory)
    probe = path
    while not probe.exists():
        probe = probe.parent
    if probe != path or not path.is_dir():
        if path.exists() and not path.is_dir():
            return f"{directory} is not a directory"
        if not probe.is_dir():
            return f"{probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} cannot be written by this process (uid {os.geteuid()})"
    return None


# --- the plan ---------------------------------------------------------------------------------------


def plan(
    engine: Engine,
    *,
    checks: Collection[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    live: bool = True,
) -> Plan:
    """The drop-ins ENGINE's unit needs for its checks that are not passing (CHECKS: only those keys).
    LIVE: ask this box's systemd and read the files (on the box); else the stored snapshot (a preview)."""
    from dashboard.models import Engine

    out = Plan(engine=engine.name, unit=engine.unit or "", scope=engine.unit_scope)
    wanted = set(checks or ())
    unknown = wanted - set(CHECKS)
    if unknown:
        out.refused = f"no such audit check: {', '.join(sorted(unknown))}; checks: {', '.join(CHECKS)}"
        return out
    if not engine.unit:
        out.refused = (
            f"{engine.name} runs outside any systemd unit (hand-run): there is no unit to add a drop-in to; "
            "start it through `sparkops launch`, or under a unit"
        )
        return out
    box = list(Engine.objects.filter(host_id=engine.host_id, retired_at__isnull=True).order_by("name"))
    if engine not in box:
        box.append(engine)
    snaps = snapshots_of(box)
    data = dict(snaps).get(engine)
    if data is None or not (data.get("unit") or {}).get("unit"):
        out.refused = (
            f"{engine.unit} has not been observed yet: no audit to fix (`sparkops audit --engine {engine.name}`)"
        )
        return out
    try:
        directory = dropin_dir(
            engine.unit, engine.unit_scope, unit_properties(engine) if live else snapshot_properties(data)
        )
    except Refused as exc:
        out.refused = str(exc)
        return out
    out.dropin_dir = directory
    why = writable(directory) if live else None
    if why:
        out.refused = f"cannot write a drop-in for {engine.unit}: {why}"
        return out
    in_force = effective_thresholds(engine.host_id, overrides)
    wants: dict[
        str, list[Any]
    ] = {}  # check -> [status, items, notes, evidence]: a box check may name this engine in several pairs
    for result in audit(box, overrides=overrides, only_engine=engine):
        if result.status == "pass" or (wanted and result.check not in wanted):
            continue
        if result.status == "applied":  # written already: what it needs is a restart, not another drop-in
            out.skipped.append({"check": result.check, "status": "applied", "why": f"{result.evidence}"})
            continue
        if result.check in ("after_enabled_units", "cold_starts_serialized"):
            items, note = ordering_settings(engine, result, snaps)
        else:
            items, note = engine_settings(engine, data, result.check, in_force[result.check])
        if not items:
            out.skipped.append({"check": result.check, "status": result.status, "why": note or "nothing to set"})
            continue
        got = wants.setdefault(result.check, [result.status, [], [], result.evidence])
        got[1] += [i for i in items if i not in got[1]]
        got[2] += [note] if note and note not in got[2] else []
    for check, (status, items, notes, evidence) in wants.items():
        name = f"{PREFIX}{check}.conf"
        fix = Fix(check, status, name, os.path.join(directory, name), items, note="\n".join(notes))
        try:
            fix.before = _read(fix.path) if live else None
        except Refused as exc:
            out.refused, out.fixes = str(exc), []
            return out
        why = overridden(data, fix)
        if why is None and fix.before == fix.text:
            why = f"{fix.path} already says this; the audit still reads: {evidence}"
        if why:
            out.skipped.append({"check": check, "status": status, "why": why})
            continue
        out.fixes.append(fix)
    return out


def _read(path: str) -> str | None:
    try:
        return host_path(path).read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Refused(f"{path} cannot be read: {exc}") from None


# --- applying it --------------------------------------------------------------------------------------


def apply(engine: Engine, the_plan: Plan) -> Plan:
    """Write THE_PLAN's drop-ins, daemon-reload, observe the unit again. Everything or nothing: a
    refusal or a failed write or reload leaves the files as they were. Returns THE_PLAN, updated."""

    if the_plan.refused or not the_plan.fixes:
        return the_plan
    why = writable(the_plan.dropin_dir)
    if why:
        the_plan.refused = f"cannot write a drop-in for {engine.unit}: {why}"
        return the_plan
    written: list[Fix] = []
    began = timezone.now()
    try:
        host_path(the_plan.dropin_dir).mkdir(parents=True, exist_ok=True)
        for fix in the_plan.fixes:
            _write(host_path(fix.path), fix.text)
            written.append(fix)
        run(_systemctl(engine.unit_scope, "daemon-reload"), timeout=60)
    except (OSError, CommandError) as exc:
        for fix in written:  # as it was: the earlier text, or no file
            target = host_path(fix.path)
            if fix.before is None:
                target.unlink(missing_ok=True)
            else:
                _write(target, fix.before)
        the_plan.refused = f"not applied, nothing changed: {exc}"
        the_plan.daemon_reload = str(exc) if isinstance(exc, CommandError) else None
        return the_plan
    for fix in the_plan.fixes:
        fix.applied = True
    the_plan.applied, the_plan.daemon_reload = True, "done"
    the_plan.entry = observed_entry(engine, since=began)
    return the_plan


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o644)
    os.replace(tmp, path)


def observed_entry(engine: Engine, *, since: datetime) -> EntryRef | None:
    """Observe ENGINE's unit now (the launch observer) and return the observed change-log entry that the
    new configuration wrote, {id, title, url}, or None (the poller may have written it first)."""
    from dashboard.models import ConfigSnapshot
    from sparkops.launch.observer import observe_now

    observe_now(engine)
    snap = (
        ConfigSnapshot.objects.filter(engine=engine, observed_at__gte=since, logged_entry_id__isnull=False)
        .order_by("-observed_at", "-id")
        .first()
    )
    if snap is None or snap.logged_entry_id is None:  # the filter excludes the latter; the types do not know
        return None
    from sparkops.changelog.models import Entry

    entry = Entry.objects.filter(pk=snap.logged_entry_id).first()
    if entry is None:
        return None
    return {"id": entry.pk, "title": entry.title, "url": f"/changelog/{entry.pk}/"}
