"""The configuration snapshot: its canonical content built from the unit (or a hand-run process)
and the engine's account, secrets redacted to a hash of their value (`build_data`,
`redact_unit_text`), hashed (`canonical`, `digest`), and stored when it changed (`observe_engine`,
which then writes the difference to the change log and checks for drift)."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from dashboard.models import ConfigSnapshot
from sparkops.collectors import flags as flagmodel
from sparkops.collectors import handrun

if TYPE_CHECKING:
    from dashboard.models import Engine

from .changelog import diff, log_change
from .drift import check_drift

log = logging.getLogger(__name__)
SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.I)
SECRET_FLAGS = frozenset({"--api-key", "--hf-token", "--ssl-keyfile"})
OLDER_UNIT = "/proc/PID/cmdline (started from an older unit)"


def _redact(name: str, value: str) -> str:
    if isinstance(value, str) and value and SECRET.search(name):
        return "redacted:" + hashlib.sha256(value.encode()).hexdigest()[:12]
    return value


def build_data(
    engine: Engine, unit_cfg: Mapping[str, Any] | None, account: dict[str, Any] | None, *, launch: str = "unit"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The canonical content of a snapshot (what is hashed) from the unit (or, LAUNCH
    "hand-run", the process's argv and environment) and the account."""
    unit = dict(unit_cfg or {})
    started_at = unit.pop("started_at", "")
    texts = unit.pop("file_texts", None) or []
    env = {k: _redact(k, v) for k, v in (unit.pop("environment", None) or {}).items()}
    env_origins = unit.pop("environment_origins", None) or {}
    start = unit.get("exec_start") or {}
    parsed = (
        flagmodel.parse_argv(
            engine.kind if engine.kind in ("vllm", "llamacpp", "sglang") else None,
            start.get("argv") or [],
            env=unit_cfg.get("environment", {}) if unit_cfg else {},
            origins=start.get("origins"),
        )
        if start.get("argv")
        else None
    )
    running = unit.get("running_argv")
    if parsed is not None and running and running != start.get("argv") and handrun.is_engine_launch(running):
        parsed = _running_flags(parsed, running, unit_cfg.get("environment", {}) if unit_cfg else {})
    flag_data = None
    if parsed is not None:
        flag_data = parsed.as_dict()
        via: dict[str, str] = {}
        for flag, origin in list(flag_data["origins"].items()):
            if origin.startswith("env:"):  # LLAMA_ARG_*: credit the file that set the variable
                name = origin[4:]
                via[flag] = name
                flag_data["origins"][flag] = env_origins.get(name, "")
        flag_data["via_env"] = via
        flag_data["flags"] = {
            k: ("redacted:" + hashlib.sha256(str(v).encode()).hexdigest()[:12] if k in SECRET_FLAGS else v)
            for k, v in flag_data["flags"].items()
        }
        secrets = {v for k, v in ((unit_cfg or {}).get("environment") or {}).items() if v and SECRET.search(k)}
        unit["exec_start"] = {**start, "argv": _redact_argv(start["argv"], secrets)}
        if unit.get("shadowed_exec_starts"):  # an overridden ExecStart= may hold a key too
            unit["shadowed_exec_starts"] = [
                {**s, "argv": _redact_argv(s.get("argv") or [], secrets)} for s in unit["shadowed_exec_starts"]
            ]
        if unit.get("running_argv"):
            unit["running_argv"] = _redact_argv(unit["running_argv"], secrets)
    if launch == "hand-run":
        unit = {}
    data = {
        "engine": engine.name,
        "kind": engine.kind,
        "launch": launch if unit_cfg else "none",
        "unit": unit or None,
        "environment": env,
        "environment_origins": env_origins,
        "flags": flag_data,
        "account": account or {},
    }
    observed: dict[str, Any] = {"unit_started_at": started_at}
    if texts and launch != "hand-run":
        secrets = {v for k, v in ((unit_cfg or {}).get("environment") or {}).items() if v and SECRET.search(k)}
        observed["files"] = [{"path": t["path"], "text": redact_unit_text(t["text"], secrets)} for t in texts]
    return data, observed


# `NAME=value` where NAME looks secret (SECRET): inside quotes (`Environment="HF_TOKEN=a b"`) up to
# the quote, else up to whitespace (`Environment=HF_TOKEN=x`, `--api-key=K`, `--api-key K`).
_SECRET_NAME = r"(?<![A-Za-z0-9_])(?P<name>[A-Za-z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)[A-Za-z0-9_]*)="
_SECRET_QUOTED = re.compile(r'"' + _SECRET_NAME + r'[^"]*"', re.I)
_SECRET_BARE = re.compile(_SECRET_NAME + r"(?:'[^']*'|[^\s\"']+)", re.I)
_SECRET_FLAG_VALUE = re.compile(
    r"(?P<flag>" + "|".join(re.escape(f) for f in sorted(SECRET_FLAGS)) + r")(?P<sep>=|[ \t]+)[^\s\"']+"
)


def redact_unit_text(text: str, secrets: Collection[str] = ()) -> str:
    """A unit file's TEXT as the launch configuration page may show it: the values of secret-looking
    assignments (`Environment=HF_TOKEN=…`), of secret flags (`--api-key K`) and every SECRETS value
    (the effective environment's secret ones, wherever they appear) replaced by "redacted"."""
    for value in sorted((v for v in secrets if len(v) >= 4), key=len, reverse=True):
        text = text.replace(value, "redacted")
    text = _SECRET_QUOTED.sub(lambda m: f'"{m["name"]}=redacted"', text)
    text = _SECRET_BARE.sub(lambda m: f"{m['name']}=redacted", text)
    return _SECRET_FLAG_VALUE.sub(lambda m: f"{m['flag']}{m['sep']}redacted", text)


def _running_flags(from_files: flagmodel.Parsed, running: list[str], env: Mapping[str, str]) -> flagmodel.Parsed:
    """What runs when the main process was started from an older unit than its files say (edited
    without daemon-reload, or reloaded and not restarted): the flags of its /proc/PID/cmdline,
    each credited to the file that gives the same value, else to the process. The log then writes
    the change when the restart brings it, not when the file was edited."""
    got = flagmodel.parse_argv(from_files.kind, running, env=env, default_origin=OLDER_UNIT)
    for flag, value in got.flags.items():
        if from_files.flags.get(flag) == value and flag in from_files.origins:
            got.origins[flag] = from_files.origins[flag]
    return got


def _redact_argv(argv: Sequence[str], secrets: Collection[str]) -> list[str]:
    """ARGV with the values of secret flags (`--api-key K`, `--api-key=K`) and of secret
    environment variables expanded into it replaced."""
    out: list[str] = []
    hide_next = False
    for word in argv:
        key, sep, _ = word.partition("=")
        if hide_next or word in secrets:
            out.append("redacted")
        elif sep and key in SECRET_FLAGS:
            out.append(f"{key}=redacted")
        else:
            out.append(word)
        hide_next = word in SECRET_FLAGS
    return out


def canonical(data: object) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


def digest(data: object) -> str:
    return hashlib.sha256(canonical(data).encode()).hexdigest()


def observe_engine(
    engine: Engine,
    unit_cfg: Mapping[str, Any] | None,
    *,
    account: dict[str, Any] | None = None,
    now: datetime | None = None,
    launch: str = "unit",
    process: dict[str, Any] | None = None,
) -> ConfigSnapshot | None:
    """Store a new snapshot of ENGINE when its configuration changed; the snapshot or None.
    ACCOUNT None: the engine did not answer; the last snapshot's account is carried.
    PROCESS: a hand-run engine's pid and cgroup (kept, not hashed: each run has its own)."""
    now = now or timezone.now()
    if unit_cfg is not None and unit_cfg.get("error"):
        log.info("unit of %s not read: %s", engine.name, unit_cfg["error"])
        return None
    previous = ConfigSnapshot.objects.filter(engine=engine).order_by("-observed_at", "-id").first()
    if account is None:
        account = (previous.data or {}).get("account") if previous else {}
    if unit_cfg is not None and "running_argv" in unit_cfg and unit_cfg["running_argv"] is None and previous:
        # no process now (stopped, restarting): what ran last stays the running argv, so an
        # outage alone is not a new configuration
        unit_cfg = {**unit_cfg, "running_argv": ((previous.data or {}).get("unit") or {}).get("running_argv")}
    data, observed = build_data(engine, unit_cfg, account, launch=launch)
    if process:
        observed["process"] = process
    h = digest(data)
    if previous is not None and previous.hash == h:
        _keep_file_texts(previous, observed)
        return None
    with transaction.atomic():
        snap = ConfigSnapshot.objects.create(
            engine=engine, observed_at=now, hash=h, data={**data, "observed": observed}, previous=previous
        )
        if previous is not None:
            lines = diff(previous.data or {}, data)
            if lines:
                entry = log_change(engine, snap, lines, now=now)
                if entry is not None:
                    snap.logged_entry_id = entry.pk
                    snap.save(update_fields=["logged_entry_id"])
    if account and snap is not None:  # the engine answered: what runs now is known
        try:
            check_drift(engine, data)
        except Exception:
            log.exception("config drift of %s not checked", engine.name)
    return snap


def _keep_file_texts(snap: ConfigSnapshot, observed: Mapping[str, Any]) -> None:
    """A snapshot stored before the unit files' text was kept gets it from the next observation
    that finds the same configuration (the text is beside what is hashed, not part of it), so the
    launch configuration page shows the files without waiting for a change."""
    prior = (snap.data or {}).get("observed") or {}
    if observed.get("files") and not prior.get("files"):
        snap.data = {**snap.data, "observed": {**prior, "files": observed["files"]}}
        snap.save(update_fields=["data"])


def latest_snapshot(engine: Engine) -> ConfigSnapshot | None:
    return ConfigSnapshot.objects.filter(engine=engine).order_by("-observed_at", "-id").first()
