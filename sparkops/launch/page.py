"""What the launch configuration page shows of one engine: its newest (or a chosen) configuration
snapshot read for a person — every flag with the file that set it, the unit's files in the order
systemd applies them, the environment (secrets redacted), the readiness helper and its budgets,
the measured starts, and the snapshot history with each version's difference (`changelog.diff`,
the same lines the observed change-log entries are written from).

Everything shown comes from `ConfigSnapshot.data`, where secret values are already stored only as a
hash; words of an argv that were not redacted when stored (an overridden ExecStart) are redacted
here again, by the secret flags and by the hashes of the environment's secret values."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from dashboard.models import ConfigSnapshot
from sparkops.audit.checks import helper_budget_s
from sparkops.collectors import flags as flagmodel
from sparkops.collectors.unitconfig import timespan_s
from sparkops.collectors.unitfiles import EDGES

from .changelog import UNIT_LINES, Data, Line, diff
from .drift import ACCOUNT_FLAGS, _same
from .snapshot import OLDER_UNIT, _redact_argv
from .starts import restart_budget

if TYPE_CHECKING:
    from dashboard.models import Engine

HISTORY = 50  # versions listed; older ones stay in the Django admin
REDACTED = "redacted"
PROC = "/proc/"


class FlagRow(TypedDict):
    flag: str
    value: str
    origin: str
    label: str
    via: str
    account: tuple[str, str] | None  # (what the engine says, its name for it)
    agrees: bool | None


class FileRow(TypedDict):
    path: str
    label: str
    text: str | None


class DirectiveRow(TypedDict):
    directive: str
    value: str
    file: str


class EdgeRow(TypedDict):
    edge: str
    unit: str
    state: str
    file: str


class EnvRow(TypedDict):
    name: str
    value: Any  # the stored value (a string), or "redacted"
    origin: str
    label: str
    secret: bool


class Readiness(TypedDict):
    helpers: list[dict[str, str]]
    type: str
    budget_s: float | None
    timeout_s: float | None
    timeout_text: str
    timeout_file: str
    margin_s: float | None


class Version(TypedDict):
    snapshot: ConfigSnapshot
    previous: ConfigSnapshot | None
    lines: list[Line]
    first: bool


def launch_page(engine: Engine, *, version: int | None = None) -> dict[str, Any]:
    """The page's context for ENGINE: its snapshot VERSION (a ConfigSnapshot id; default the newest)
    and the history. {"snapshot": None, ...} when the engine has none; LookupError for a VERSION that
    is not one of ENGINE's."""
    history = list(ConfigSnapshot.objects.filter(engine=engine).order_by("-observed_at", "-id")[:HISTORY])
    budget = restart_budget(engine)
    if version is None:
        snap = history[0] if history else None
    else:
        snap = (
            next((s for s in history if s.pk == version), None)
            or ConfigSnapshot.objects.filter(engine=engine, pk=version).first()
        )
        if snap is None:
            raise LookupError(f"{engine.name} has no configuration snapshot {version}")
    out: dict[str, Any] = {
        "engine": engine,
        "budget": budget,
        "starts": [
            {"start": s, "active_s": (s.active_at - s.started_at).total_seconds() if s.active_at else None}
            for s in budget["starts"]
        ],
        "snapshot": snap,
        "history": versions(history),
        "latest": history[0] if history else None,
    }
    if snap is None:
        return out
    data = snap.data or {}
    hidden = _secret_hashes(data)
    unit = data.get("unit") or {}
    flags = flag_rows(data, hidden)
    out.update(
        launch=data.get("launch") or "none",
        unit=unit,
        process=(data.get("observed") or {}).get("process"),
        model=((data.get("flags") or {}).get("model")),
        flags=flags,
        older_unit=any(r["origin"] == OLDER_UNIT for r in flags),
        problems=((data.get("flags") or {}).get("problems") or []),
        unknown=_redact([str(w) for w in (data.get("flags") or {}).get("unknown") or []], hidden),
        exec_start=_argv_line(unit.get("exec_start"), hidden),
        running_argv=" ".join(_redact(unit.get("running_argv") or [], hidden)),
        shadowed=[
            {"file": s.get("file", ""), "argv": " ".join(_redact(s.get("argv") or [], hidden))}
            for s in unit.get("shadowed_exec_starts") or []
        ],
        files=unit_files(data),
        directives=directive_rows(unit),
        edges=edge_rows(unit),
        environment=environment_rows(data),
        environment_files=unit.get("environment_files") or [],
        readiness=readiness(unit, hidden),
        account=account_rows(data),
    )
    return out


# --- the flags ---------------------------------------------------------------------------------


def _file_order(data: Data | None) -> dict[str, int]:
    """Where each file stands in the order systemd applies them: the fragment, the drop-ins, then the
    EnvironmentFile=s (which override Environment=), then anything else (/proc, the engine)."""
    unit = (data or {}).get("unit") or {}
    order: dict[str, int] = {}
    for path in unit.get("files_read") or [unit.get("fragment_path", "")] + (unit.get("drop_in_paths") or []):
        order.setdefault(path, len(order))
    for f in unit.get("environment_files") or []:
        order.setdefault(f.get("path", ""), len(order))
    return order


def origin_label(data: Data | None, path: str) -> str:
    """What kind of file PATH is to this engine: "unit file", "drop-in 2 of 3", "EnvironmentFile=",
    "the process (hand-run)", ..."""
    unit = (data or {}).get("unit") or {}
    drop_ins = unit.get("drop_in_paths") or []
    if not path:
        return ""
    if path == unit.get("fragment_path"):
        return "unit file"
    if path in drop_ins:
        return f"drop-in {drop_ins.index(path) + 1} of {len(drop_ins)}"
    if any(f.get("path") == path for f in unit.get("environment_files") or []):
        return "EnvironmentFile="
    if path == OLDER_UNIT:
        return "what runs (an older unit)"
    if path.startswith(PROC):
        return "the process" + (" (hand-run)" if (data or {}).get("launch") == "hand-run" else "")
    return ""


def flag_rows(data: Data, hidden: Collection[str] = frozenset()) -> list[FlagRow]:
    """[{flag, value, origin, label, via, account, agrees}] in the order of the files that set them
    (a value that is a secret of the environment, HIDDEN by its hash, shows as "redacted")."""
    flags = (data.get("flags") or {}).get("flags") or {}
    origins = (data.get("flags") or {}).get("origins") or {}
    via = (data.get("flags") or {}).get("via_env") or {}
    said = _account_says(data)
    order = _file_order(data)
    rows: list[FlagRow] = []
    for flag, value in flags.items():
        origin = origins.get(flag, "")
        shown = flagmodel.render(value)
        if shown.startswith("redacted:") or _digest(shown) in hidden:
            shown = REDACTED
        account = said.get(flag)
        rows.append(
            {
                "flag": flag,
                "value": shown,
                "origin": origin,
                "label": origin_label(data, origin),
                "via": via.get(flag, ""),
                "account": account,
                "agrees": None if account is None else _same(shown, account[0]),
            }
        )
    rows.sort(key=lambda r: (order.get(r["origin"], len(order)), r["flag"]))
    return rows


def _account_says(data: Data) -> dict[str, tuple[str, str]]:
    """{flag: (value, what the engine calls it)} from the engine's own account."""
    account = data.get("account") or {}
    out: dict[str, tuple[str, str]] = {}
    for flag, path, name in ACCOUNT_FLAGS.get(data.get("kind") or "", ()):
        said = account
        for key in path:
            said = said.get(key) if isinstance(said, dict) else None
        if said not in (None, "", "None"):
            out[flag] = (str(said), name)
    return out


def account_rows(data: Data) -> list[tuple[str, str]]:
    """The engine's own account, one (name, value) a line (nested dicts flattened with dots)."""

    def walk(prefix: str, value: object) -> Iterator[tuple[str, str]]:
        if isinstance(value, dict):
            for k in sorted(value):
                yield from walk(f"{prefix}.{k}" if prefix else k, value[k])
        elif value not in (None, "", [], {}):
            yield prefix, flagmodel.render(value)

    return list(walk("", data.get("account") or {}))


# --- the unit ------------------------------------------------------------------------------------


def unit_files(data: Data) -> list[FileRow]:
    """[{path, label, text}] of the unit's files in the order systemd applies them; text None when
    the snapshot did not keep it (taken before the files' text was kept, or the files unreadable)."""
    unit = data.get("unit") or {}
    texts = {f["path"]: f["text"] for f in (data.get("observed") or {}).get("files") or []}
    paths = unit.get("files_read") or [
        p for p in [unit.get("fragment_path", "")] + (unit.get("drop_in_paths") or []) if p
    ]
    return [{"path": p, "label": origin_label(data, p), "text": texts.get(p)} for p in paths]


def directive_rows(unit: Mapping[str, Any]) -> list[DirectiveRow]:
    """[{directive, value, file}] of the unit's settings the audit holds to the playbook."""
    files = unit.get("directive_files") or {}
    rows: list[DirectiveRow] = []
    for label, key, directive in UNIT_LINES:
        value = unit.get(key)
        if value not in (None, ""):
            rows.append({"directive": label, "value": flagmodel.render(value), "file": files.get(directive, "")})
    return rows


def edge_rows(unit: Mapping[str, Any]) -> list[EdgeRow]:
    """[{edge, unit, state, file}] of After=/Wants=/Requires=/BindsTo=, each named unit's state."""
    states = unit.get("edge_states") or {}
    rows: list[EdgeRow] = []
    for edge in EDGES:
        files = ", ".join((unit.get("edge_files") or {}).get(edge) or [])
        for name in (unit.get("edges") or {}).get(edge) or []:
            s = states.get(name) or {}
            state = "/".join(x for x in (s.get("LoadState"), s.get("UnitFileState"), s.get("ActiveState")) if x)
            rows.append({"edge": f"{edge}=", "unit": name, "state": state, "file": files})
    return rows


def environment_rows(data: Data) -> list[EnvRow]:
    """[{name, value, origin, label, secret}], secrets shown as "redacted" (their stored hash is not
    shown either: a short hash of a short secret can be guessed)."""
    env = data.get("environment") or {}
    origins = data.get("environment_origins") or {}
    rows: list[EnvRow] = []
    for name in sorted(env):
        value = env[name]
        secret = isinstance(value, str) and value.startswith("redacted:")
        rows.append(
            {
                "name": name,
                "value": REDACTED if secret else value,
                "origin": origins.get(name, ""),
                "label": origin_label(data, origins.get(name, "")),
                "secret": secret,
            }
        )
    return rows


def readiness(unit: Mapping[str, Any], hidden: Collection[str]) -> Readiness:
    """The readiness helper (the last ExecStartPost=), its budget, TimeoutStartSec and the margin
    between them."""

    posts = unit.get("exec_start_post") or []
    timeout = timespan_s(unit.get("timeout_start_usec"))
    helper = posts[-1] if posts else None
    budget = helper_budget_s(helper.get("argv") or []) if helper else None
    return {
        "helpers": [{"argv": " ".join(_redact(p.get("argv") or [], hidden)), "file": p.get("file", "")} for p in posts],
        "type": unit.get("type") or "",
        "budget_s": budget,
        "timeout_s": timeout,
        "timeout_text": unit.get("timeout_start_usec") or "",
        "timeout_file": (unit.get("directive_files") or {}).get("TimeoutStartSec", ""),
        "margin_s": (timeout - budget) if budget is not None and timeout is not None else None,
    }


# --- secrets -------------------------------------------------------------------------------------


def _secret_hashes(data: Data) -> set[str]:
    """The short hashes under which the snapshot stored its secret values."""
    values = list((data.get("environment") or {}).values()) + list(
        ((data.get("flags") or {}).get("flags") or {}).values()
    )
    return {v.split(":", 1)[1] for v in values if isinstance(v, str) and v.startswith("redacted:")}


def _redact(argv: Sequence[str], hidden: Collection[str]) -> list[str]:
    """ARGV with secret flags' values, and words whose hash is one of HIDDEN, redacted."""
    words = _redact_argv(list(argv), set())
    return [REDACTED if _digest(w) in hidden else w for w in words]


def _digest(text: str) -> str:
    """The short hash a snapshot stores a secret under (`snapshot._redact`)."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _argv_line(start: Mapping[str, Any] | None, hidden: Collection[str]) -> dict[str, str] | None:
    if not start:
        return None
    return {
        "argv": " ".join(_redact(start.get("argv") or [], hidden)),
        "file": start.get("file", ""),
        "from": start.get("from", ""),
    }


# --- the history ---------------------------------------------------------------------------------


def versions(history: Sequence[ConfigSnapshot]) -> list[Version]:
    """[{snapshot, lines: [(name, old, new, file)], first}] newest first: each version's difference
    from the one before it (`changelog.diff`, as the observed change-log entry has it)."""
    missing = {s.previous_id for s in history if s.previous_id} - {s.pk for s in history}
    before = {s.pk: s for s in history}
    before.update(ConfigSnapshot.objects.in_bulk(missing))
    out: list[Version] = []
    for snap in history:
        previous = before.get(snap.previous_id) if snap.previous_id else None
        lines = diff(previous.data or {}, snap.data or {}) if previous is not None else []
        hidden = _secret_hashes(snap.data or {}) | (_secret_hashes(previous.data or {}) if previous else set())
        out.append(
            {
                "snapshot": snap,
                "previous": previous,
                "lines": [(n, _hide(o, hidden), _hide(v, hidden), f) for n, o, v, f in lines],
                "first": previous is None,
            }
        )
    return out


def _hide(text: str, hidden: Collection[str]) -> str:
    """A diff value: a stored secret hash shows as "redacted", and so does a word of a command line
    (ExecStartPost=) that is a secret flag's value or one of the secret values HIDDEN hashes."""
    if text.startswith("redacted:"):
        return REDACTED
    return " ".join(_redact(text.split(" "), hidden))
