"""The difference between two configuration snapshots (`diff`), and the observed change-log entry
written from it (`log_change`, by "SparkOps"; `is_observed` tells such an entry from a person's)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dashboard.models import KVPoolEntry
from sparkops.changelog.grammar import EvidenceLine, FlagLine
from sparkops.changelog.models import AppendOnlyError, Entry
from sparkops.changelog.services import entry_create
from sparkops.collectors import flags as flagmodel
from sparkops.collectors.unitfiles import EDGES

if TYPE_CHECKING:
    from dashboard.models import ConfigSnapshot, Engine

Data = Mapping[str, Any]  # a configuration snapshot's data (stored JSON, snapshot.build_data's)
Line = tuple[str, str, str, str]  # (name, old, new, the file that set the new value)

log = logging.getLogger(__name__)
AUTHOR = "SparkOps"
# The first words of an observed entry's body: its mark after an export and import, which keep
# the text but write the importer as the author.
OBSERVED_MARK = "Observed by SparkOps"
UNIT_LINES = (  # (label in the log, key in data["unit"], the directive that sets it)
    ("Restart=", "restart", "Restart"),
    ("RestartUSec=", "restart_usec", "RestartSec"),
    ("StartLimitBurst=", "start_limit_burst", "StartLimitBurst"),
    ("StartLimitIntervalUSec=", "start_limit_interval_usec", "StartLimitIntervalSec"),
    ("TimeoutStartUSec=", "timeout_start_usec", "TimeoutStartSec"),
    ("MemoryHigh=", "memory_high", "MemoryHigh"),
    ("MemoryMax=", "memory_max", "MemoryMax"),
    ("CPUQuotaPerSecUSec=", "cpu_quota_per_sec_usec", "CPUQuota"),
    ("User=", "user", "User"),
    ("Type=", "type", "Type"),
)


def _flags_of(data: Data | None) -> dict[str, Any]:
    return ((data or {}).get("flags") or {}).get("flags") or {}


def _origin(data: Data | None, flag: str) -> str:
    return (((data or {}).get("flags") or {}).get("origins") or {}).get(flag, "")


def diff(before: Data, after: Data) -> list[Line]:
    """[(name, old, new, file that set the new value)] between two snapshots' data: the flags,
    the model, the unit's directives, its readiness helper and ordering, the environment."""
    lines: list[Line] = []
    old_f, new_f = _flags_of(before), _flags_of(after)
    for flag in sorted(set(old_f) | set(new_f), key=lambda f: (f not in new_f, f)):
        if old_f.get(flag) != new_f.get(flag):
            lines.append(
                (
                    flag,
                    _render(old_f.get(flag)),
                    _render(new_f.get(flag)),
                    _origin(after, flag) if flag in new_f else _origin(before, flag),
                )
            )
    old_m = ((before or {}).get("flags") or {}).get("model")
    new_m = ((after or {}).get("flags") or {}).get("model")
    if old_m != new_m and "--model" not in new_f and "--model-path" not in new_f:
        lines.append(
            (
                "model",
                _render(old_m),
                _render(new_m),
                ((after.get("unit") or {}).get("exec_start") or {}).get("file", ""),
            )
        )
    old_u, new_u = before.get("unit") or {}, after.get("unit") or {}
    files = new_u.get("directive_files") or {}
    for label, key, directive in UNIT_LINES:
        if old_u.get(key) != new_u.get(key):
            lines.append((label, _render(old_u.get(key)), _render(new_u.get(key)), files.get(directive, "")))
    for label, key in (("ExecStartPost=", "exec_start_post"), ("ExecStopPost=", "exec_stop_post")):
        old_cmds = [" ".join(c.get("argv") or []) for c in old_u.get(key) or []]
        new_cmds = [" ".join(c.get("argv") or []) for c in new_u.get(key) or []]
        if old_cmds != new_cmds:
            lines.append(
                (label, "; ".join(old_cmds), "; ".join(new_cmds), ((new_u.get(key) or [{}])[-1] or {}).get("file", ""))
            )
    for edge in EDGES:
        a, b = (old_u.get("edges") or {}).get(edge) or [], (new_u.get("edges") or {}).get(edge) or []
        if a != b:
            lines.append(
                (f"{edge}=", " ".join(a), " ".join(b), ", ".join((new_u.get("edge_files") or {}).get(edge) or []))
            )
    old_env, new_env = before.get("environment") or {}, after.get("environment") or {}
    origins = after.get("environment_origins") or {}
    for name in sorted(set(old_env) | set(new_env)):
        if old_env.get(name) != new_env.get(name) and not name.endswith("_ARGS"):  # $X_ARGS: its flags are listed
            lines.append((f"{name}=", _render(old_env.get(name)), _render(new_env.get(name)), origins.get(name, "")))
    return lines


def _render(value: object) -> str:
    return "(unset)" if value is None else flagmodel.render(value)


def line_text(name: str, old: str, new: str, origin: str) -> str:
    return f"`{name}`: {old} → {new}" + (f" (set in {origin})" if origin else "")


def log_change(engine: Engine, snap: ConfigSnapshot, lines: list[Line], *, now: datetime) -> Entry | None:
    """The observed change-log entry for LINES (the change log's own service writes it)."""

    shown = [f"{n} {o} → {v}" for n, o, v, _ in lines[:2]]
    title = f"Observed on {engine.name}: " + "; ".join(shown) + (f" (+{len(lines) - 2} more)" if len(lines) > 2 else "")
    unit_data = snap.data.get("unit") or {}
    pending = sorted(unit_data.get("environment_not_running") or {})
    where = (
        # issue 47: a fix written into a running unit is in its files, not yet in its process
        f"in the unit, not yet in what runs ({', '.join(pending)} not in its main process's environment: "
        f"applied, takes effect at the next restart, `{'systemctl --user' if unit_data.get('scope') == 'user' else 'sudo systemctl'} "
        f"restart {unit_data.get('unit', '')}`)"
        if pending
        else "in what runs"
    )
    body = [
        f"{OBSERVED_MARK} {where} (`systemctl show`/`cat` of the unit, its environment, "
        f"the engine's own account), configuration snapshot {snap.pk}:",
        "",
    ]
    body += [f"- {line_text(*line)}" for line in lines]
    row = (
        KVPoolEntry.objects.filter(
            engine=engine, recorded_at__gte=(snap.previous.observed_at if snap.previous else now)
        )
        .order_by("-recorded_at")
        .first()
    )
    evidence: list[EvidenceLine] = []
    if row is not None:
        body += [
            "",
            f"KV-pool ledger row of the same restart: {row.pool_tokens} tokens at window {row.window} ({row.note}).",
        ]
        evidence.append(EvidenceLine(kind="url", url=f"/changelog/ledgers/#kv-{row.pk}"))
    unit = (snap.data.get("unit") or {}).get("unit", "")
    try:
        return entry_create(
            author=None,
            author_name=AUTHOR,
            effective_at=now,
            title=title[:200],
            kind="flag_change",
            engines=[engine],
            units=unit,
            body_md="\n".join(body),
            flags=[FlagLine(n[:120], o[:500], v[:500]) for n, o, v, _ in lines],
            evidence=evidence,
        )
    except AppendOnlyError as exc:  # the same content already logged (a DuplicateError)
        log.info("observed change of %s not logged again: %s", engine.name, exc)
        return None


def is_observed(entry: Entry) -> bool:
    """Whether a change-log entry was written by this module rather than by a person."""
    return (entry.author_id is None and entry.author_name == AUTHOR) or entry.body_md.startswith(OBSERVED_MARK)
