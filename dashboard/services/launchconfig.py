"""Know how each engine was launched: observe, version, and let the change log write itself.

Each box's resident poller calls `Observer.tick` on a thread of its own (the launch duty), with
every metrics tick's unit states and compiler scan; it costs a time check, except every
OBSERVE_EVERY_S and at once when a unit's main process, start time or state, or an engine's
status moved (a restart, a stop, a unit brought up). Then, for the box's own engines:

1. read their units (`collectors.unitconfig.read_units`: one `systemctl show` and one
   `systemctl cat` per scope, the named units' states, the EnvironmentFiles) and take, for
   those that answer, the engine's own account as its collector last read it (each collector's
   `account_of`: vLLM `/v1/models`, `/version` and the `vllm:cache_config_info` labels;
   llama.cpp `/props`; SGLang `/get_server_info`), no request of its own;
2. parse the effective ExecStart with the engine's argument model (`collectors.flags`), each
   flag credited to the file that set it (the fragment, the drop-in, or the EnvironmentFile of
   an `LLAMA_ARG_*`/`$VAR` it came through);
3. store a `ConfigSnapshot` when the canonical JSON hashes differently from the engine's last
   one (secrets — API keys, tokens, passwords — are stored as a hash of their value only);
4. write the difference into the change log as an *observed* `flag_change` entry by
   "SparkOps" (`--max-model-len: 131072 → 262144 (set in …/20-window.conf)`), with a link to
   the KV-pool ledger row of the same restart when there is one.

An engine that is not up is snapshotted only once it has stayed so for a whole interval (its
unit may be the reason it never comes up); otherwise the snapshot waits for the engine to
answer, so one restart gives one snapshot with the flags and the account together."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from datetime import UTC, timedelta

from django.db import transaction
from django.utils import timezone

from dashboard import http
from dashboard.collectors import collector_for, handrun, unitconfig
from dashboard.collectors import flags as flagmodel
from dashboard.models import ConfigSnapshot, KVPoolEntry

log = logging.getLogger(__name__)
OBSERVE_EVERY_S = 60.0
MIN_GAP_S = 5.0  # a flapping engine's every status change does not cost an observation each
ACCOUNT_TIMEOUT_S = 1.0  # outside a poller, the account is read with this timeout (its requests at once)
AUTHOR = "SparkOps"
# The first words of an observed entry's body: its mark after an export and import, which keep
# the text but write the importer as the author.
OBSERVED_MARK = "Observed by SparkOps"
SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.I)
SECRET_FLAGS = frozenset({"--api-key", "--hf-token", "--ssl-keyfile"})
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
OLDER_UNIT = "/proc/PID/cmdline (started from an older unit)"


class Observer:
    """What one poller remembers between observations (nothing is lost by forgetting it)."""

    def __init__(self, every_s=OBSERVE_EVERY_S):
        self.every_s = every_s
        self.at = float("-inf")
        self.signature = None
        self.down_seen: set[int] = set()  # engines seen not up at the last observation
        self.starts = StartTracker()
        self.failing: dict[int, int] = {}  # engine pk -> its failing audit checks at the last observation
        # Engines up whose account the collector had not read since their process started: the
        # poller reads it at its next poll, and the next tick that has it observes again at once.
        self.accounts_wanted: set[int] = set()
        self._accounts_asked: set[int] = set()  # of those, handed to the poller since the observation

    def accounts_to_read(self):
        """The engines whose account the poller should read again at its next poll: each once per
        observation (an engine that does not answer is not asked every tick)."""
        new = self.accounts_wanted - self._accounts_asked
        self._accounts_asked |= new
        return new

    def track(self, *, engines, units, processes=None):
        """Follow the engines' starts through one metrics tick's UNITS and PROCESSES."""
        try:
            self.starts.track(engines, units, processes or {})
        except Exception:
            log.exception("engine starts not tracked")

    def tick(self, *, engines, units, processes=None, host=None, now=None, accounts=None):
        """Observe ENGINES when due (UNITS: this tick's `systemctl show` of their units;
        PROCESSES: its compiler scan, for telling cold starts from warm ones; ACCOUNTS: the
        poller's {engine pk: (when read, epoch s; the engine's account)})."""
        now = time.monotonic() if now is None else now
        self.track(engines=engines, units=units, processes=processes)
        signature = {
            e.pk: (
                e.status,
                *[(units.get(e.unit) or {}).get(k) for k in ("MainPID", "ExecMainStartTimestamp", "ActiveState")],
            )
            for e in engines
        }
        since = now - self.at
        arrived = accounts is not None and any(
            e.pk in self.accounts_wanted
            and run_account(accounts, e, (units.get(e.unit) or {}).get("ExecMainStartTimestamp")) is not None
            for e in engines
        )
        if not arrived and (since < MIN_GAP_S or (since < self.every_s and signature == self.signature)):
            return []
        self.at, self.signature = now, signature
        made = self.observe(engines, host=host, accounts=accounts)
        try:
            self.failing = failing_counts(engines)
        except Exception:
            log.exception("launch audit not run")
        return made

    def observe(self, engines, *, host=None, accounts=None):
        """Snapshot ENGINES' launch configurations (those whose unit or process says something
        new), and find the engines no unit runs on HOST (default: the engines' host). ACCOUNTS:
        as `tick`'s; None (a caller outside a poller): each engine up is asked for it now."""
        host = host or next((e.host for e in engines), None)
        self.accounts_wanted, self._accounts_asked = set(), set()

        def account_for(engine, unit_cfg=None):
            if accounts is None:
                return fetch_account(engine)
            account = run_account(accounts, engine, (unit_cfg or {}).get("started_at"))
            if account is None:
                self.accounts_wanted.add(engine.pk)
            return account

        made = observe_hand_run(host, engines, account_for=account_for) if host is not None else []
        engines = [e for e in engines if e.retired_at is None and e.unit]
        configs = unitconfig.read_units(engines)
        for engine in engines:
            up = engine.status == "up"
            if not up and engine.pk not in self.down_seen:
                self.down_seen.add(engine.pk)
                continue  # it may be starting: the snapshot waits for its answer
            if up:
                self.down_seen.discard(engine.pk)
            unit_cfg = configs.get(engine.pk)
            if unit_cfg is not None and unit_cfg.get("error"):
                log.info("unit of %s not read: %s", engine.name, unit_cfg["error"])
                continue  # nothing to version, so its account is not asked either
            account = account_for(engine, unit_cfg) if up else None
            if up and account is None:
                continue  # one restart, one snapshot: with the account of the process that runs
            try:
                snap = observe_engine(engine, unit_cfg, account=account)
            except Exception:
                log.exception("launch configuration of %s not observed", engine.name)
                continue
            if snap is not None:
                made.append(snap)
        return made


def run_account(accounts, engine, started):
    """ENGINE's account in ACCOUNTS ({pk: (when read, epoch s; account)}) when it was read since
    its process started (STARTED: systemd's ExecMainStartTimestamp; none known: any), else None:
    one read before a restart is the previous process's."""
    read_at, account = accounts.get(engine.pk, (None, None))
    began = parse_timestamp(started or "")
    if read_at is None or (began is not None and read_at < began.timestamp()):
        return None
    return account


def failing_counts(engines):
    """{engine pk: its failing launch-audit checks} over ENGINES (one box's): one audit."""
    from dashboard.audit import run as audit

    engines = [e for e in engines if e.retired_at is None]
    results = audit.audit(engines)
    return {e.pk: sum(r.status == "fail" and audit.concerns(r, e) for r in results) for e in engines}


# --- engines outside any unit ------------------------------------------------------------------

HAND_RUN_PREFIX = "hand-run-"


def observe_hand_run(host, engines, *, account_for=None):
    """Engine servers on this box that no watched unit runs become engines of their own
    (`hand-run-PORT`, polled and on the overview like the rest) with a snapshot of their argv and
    environment (/proc/PID/environ: what a shell gave them); one whose process is gone is retired.
    ACCOUNT_FOR(engine): an engine's account, or None when not known (default: ask it now)."""
    from dashboard.collectors import handrun
    from dashboard.engine_lifecycle import engine_add, engine_retire
    from dashboard.models import Engine

    found = handrun.scan(watched_units={e.unit for e in engines if e.unit})
    made, seen = [], set()
    for proc in found:
        url = f"http://{proc['host']}:{proc['port']}"
        known = next((e for e in engines if _same_address(e.url, proc["host"], proc["port"])), None)
        if known is not None and known.unit:
            continue  # a watched unit's engine after all (its cgroup did not say so)
        name = known.name if known is not None else f"{HAND_RUN_PREFIX}{proc['port']}"
        seen.add(name)
        engine = known or Engine.objects.select_related("host").filter(name=name).first()
        if engine is None or engine.retired_at is not None:
            with transaction.atomic():
                engine, _ = engine_add(name=name, kind=proc["kind"], url=url, host=host.name)
            log.warning(
                "a hand-run %s engine (pid %s) serves %s outside any unit: watching it as %s",
                proc["kind"],
                proc["pid"],
                url,
                name,
            )
        pid = proc["pid"]
        cfg = {
            "environment": proc["environ"],
            "environment_origins": {k: f"/proc/{pid}/environ" for k in proc["environ"]},
            "exec_start": {
                "argv": proc["argv"],
                "origins": [f"/proc/{pid}/cmdline"] * len(proc["argv"]),
                "file": f"/proc/{pid}/cmdline",
            },
        }
        snap = observe_engine(
            engine,
            cfg,
            account=(account_for or fetch_account)(engine) if engine.status == "up" else None,
            launch="hand-run",
            process={"pid": pid, "cgroup": proc["cgroup"], "scope": proc["unit"]},
        )
        if snap is not None:
            made.append(snap)
    for engine in Engine.objects.filter(host=host, name__startswith=HAND_RUN_PREFIX, unit="", retired_at__isnull=True):
        if engine.name not in seen:
            with transaction.atomic():
                engine_retire(name=engine.name)
            log.info("hand-run engine %s is gone: retired (its history stays)", engine.name)
    return made


def _same_address(url, host, port):
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    local = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
    same_host = parts.hostname == host or (parts.hostname in local and host in local)
    return same_host and (parts.port or (443 if parts.scheme == "https" else 80)) == port


# --- starts: the restart budget ---------------------------------------------------------------


def parse_timestamp(text):
    """systemd's `Tue 2026-07-14 10:02:11 UTC`, with microseconds (`… 10:02:11.492971 UTC`, what
    `--timestamp=us+utc` prints) or `@1752487331` → aware datetime, or None."""
    from datetime import datetime

    if not text:
        return None
    text = text.strip()
    if text.startswith("@"):
        try:
            return datetime.fromtimestamp(float(text[1:]), tz=UTC)
        except ValueError:
            return None
    parts = text.split()
    if len(parts) >= 3 and len(parts[0]) == 3:
        parts = parts[1:]  # the weekday
    try:
        fmt = "%Y-%m-%d %H:%M:%S.%f" if len(parts) > 1 and "." in parts[1] else "%Y-%m-%d %H:%M:%S"
        naive = datetime.strptime(" ".join(parts[:2]), fmt)
    except ValueError:
        return None
    if len(parts) > 2 and parts[2] in ("UTC", "GMT"):
        return naive.replace(tzinfo=UTC)
    local = time.mktime(naive.timetuple()) + naive.microsecond / 1e6  # the box's local time
    return datetime.fromtimestamp(local, tz=UTC)


class StartTracker:
    """Every start of every unit, from its InactiveExitTimestamp (noticed by a new
    ExecMainStartTimestamp) to the first answer the poller
    had from the new process (a time check and a dict per tick; one row when a start ends)."""

    def __init__(self):
        self.stamps: dict[int, str] = {}
        self.last_ok: dict[int, object] = {}
        self.pending: dict[int, dict] = {}

    def track(self, engines, units, processes):
        for e in engines:
            props = units.get(e.unit) or {}
            stamp = props.get("ExecMainStartTimestamp")
            first = e.pk not in self.stamps
            if first and not stamp and props.get("ActiveState") in ("inactive", "failed"):
                # seen never started (or collected): its next start is one seen from its beginning,
                # even when the engine answers by the next tick
                self.stamps[e.pk] = ""
                first = False
            if stamp and stamp != self.stamps.get(e.pk):
                self.stamps[e.pk] = stamp
                self._failed(e, self.pending.pop(e.pk, None))  # started again before it served
                if not first or (e.status != "up" and props.get("ActiveState") in ("active", "activating")):
                    self.pending[e.pk] = {
                        "stamp": stamp,
                        "inactive_exit": props.get("InactiveExitTimestamp"),
                        "active": props.get("ActiveEnterTimestamp"),
                        "compilers": 0,
                        "ok_before": self.last_ok.get(e.pk) if not first else e.last_ok_at,
                        "pid": int(props.get("MainPID") or 0) or None,  # names its gate's journal lines
                    }
            p = self.pending.get(e.pk)
            if p is not None and "healthy" not in p and props.get("ActiveState") in ("failed", "inactive"):
                self._failed(e, self.pending.pop(e.pk))  # its gate gave up, or the process died
                p = None
            if p is not None:
                mine = [c for c in processes.get("compiler_procs") or [] if c.get("unit") == e.unit]
                p["compilers"] = max(p["compilers"], len(mine))
                p["active"] = props.get("ActiveEnterTimestamp") or p["active"]
                if e.status == "up" and e.last_ok_at and (p["ok_before"] is None or e.last_ok_at > p["ok_before"]):
                    p.setdefault("healthy", e.last_ok_at)
                # A readiness helper in ExecStartPost= sees the engine answer before systemd calls the
                # unit active: the start is stored once the unit is no longer activating (with its
                # ActiveEnterTimestamp), timed to the first answer.
                if "healthy" in p and props.get("ActiveState") != "activating":
                    del self.pending[e.pk]
                    record_start(e, p)
            self.last_ok[e.pk] = e.last_ok_at

    @staticmethod
    def _failed(engine, pending):
        """A start that ended without serving: its row, with what its readiness gate said."""
        if pending is None or "healthy" in pending:
            return
        from dashboard.controls.gates import record_failed_start

        record_failed_start(engine, pending, kind="cold" if pending["compilers"] else "warm")


def record_start(engine, pending):
    """Store one measured start and raise what it broke: over its budget, or a cold start
    overlapping another engine's on the same box."""
    from dashboard.alerts.services import external_alert_fire, external_alert_resolve
    from dashboard.audit.checks import helper_budget_s
    from dashboard.models import EngineStart

    started = parse_timestamp(pending["stamp"])
    if started is None:
        return None
    # The start began when the unit left inactive (InactiveExitTimestamp), before its ExecStartPre=
    # ran: systemd 252 updates it on every start, automatic restarts included. Without an
    # ExecStartPre= it is a few hundred microseconds after ExecMainStartTimestamp (the fork is
    # stamped first): the start is the earlier of the two, the same start when they are that close.
    began = parse_timestamp(pending.get("inactive_exit"))
    if began is not None and began <= started + timedelta(seconds=1):
        started = min(began, started)
    active = parse_timestamp(pending["active"])
    snap = latest_snapshot(engine)
    unit = ((snap.data if snap else {}) or {}).get("unit") or {}
    posts = unit.get("exec_start_post") or []
    budget = helper_budget_s(posts[-1].get("argv") or []) if posts else None
    timeout = unitconfig.timespan_s(unit.get("timeout_start_usec"))
    start = EngineStart.objects.create(
        engine=engine,
        started_at=started,
        active_at=active if active and active >= started else None,
        healthy_at=max(pending.get("healthy") or engine.last_ok_at, started),
        kind="cold" if pending["compilers"] else "warm",
        compilers_max=pending["compilers"],
        budget_s=budget,
        timeout_s=timeout if timeout not in (None, float("inf")) else None,
    )
    from dashboard.controls.gates import attach

    attach(start, engine, since=started, mainpid=pending.get("pid"))  # its gate's verdict, from the journal
    limit = start.budget_s or start.timeout_s
    if limit and start.duration_s > limit:
        external_alert_fire(
            rule="start_over_budget",
            severity="warning",
            engine=engine,
            subject=engine.name,
            message=(
                f"{engine.name}'s {start.kind} start took {start.duration_s:.0f} s, past its "
                f"{'readiness budget' if start.budget_s else 'TimeoutStartSec'} of {limit:g} s"
            ),
        )
    else:
        external_alert_resolve(rule="start_over_budget", engine=engine, subject=engine.name)
    if start.kind == "cold":
        overlap = (
            EngineStart.objects.filter(
                engine__host_id=engine.host_id,
                kind="cold",
                started_at__lt=start.healthy_at,
                healthy_at__gt=start.started_at,
            )
            .exclude(engine=engine)
            .select_related("engine")
            .first()
        )
        if overlap is not None:
            external_alert_fire(
                rule="cold_starts_overlap",
                severity="warning",
                host=engine.host,
                subject=engine.host.name,
                message=(
                    f"{engine.name} and {overlap.engine.name} cold-started at once "
                    f"({start.started_at:%H:%M:%S} and {overlap.started_at:%H:%M:%S}): two compile "
                    "storms do not fit in one box; serialize the units"
                ),
            )
    return start


def restart_budget(engine):
    """The engine's starts per class: {"cold"|"warm": {n, median, min, max, first, last}} (those that
    served), the latest that failed before serving, and the budgets of its latest start."""
    from statistics import median

    from dashboard.models import EngineStart

    rows = list(EngineStart.objects.filter(engine=engine).order_by("started_at"))
    out = {"starts": rows[-20:][::-1], "classes": {}, "failed": [r for r in rows if r.healthy_at is None][-5:][::-1]}
    for kind in ("cold", "warm"):
        mine = [r for r in rows if r.kind == kind and r.healthy_at is not None]  # a failed start has no duration
        if mine:
            d = [r.duration_s for r in mine]
            out["classes"][kind] = {
                "n": len(mine),
                "median": median(d),
                "min": min(d),
                "max": max(d),
                "first": mine[0].started_at,
                "last": mine[-1].started_at,
            }
    last = rows[-1] if rows else None
    out["budget_s"], out["timeout_s"] = (last.budget_s, last.timeout_s) if last else (None, None)
    return out


def box_cold_boot(host):
    """A full cold boot of HOST: the sum of its engines' median cold starts (they must be
    serialized), with each engine's figure; engines never seen cold count their slowest start."""
    from dashboard.models import Engine

    parts = []
    for engine in Engine.objects.filter(host=host, retired_at__isnull=True).order_by("name"):
        b = restart_budget(engine)
        figure = (b["classes"].get("cold") or {}).get("median") or max([c["max"] for c in b["classes"].values()] or [0])
        if figure:
            parts.append((engine.name, figure, b["budget_s"], b["timeout_s"]))
    return {"total_s": sum(p[1] for p in parts), "engines": parts}


# --- the engine's own account --------------------------------------------------------------


def fetch_account(engine):
    """What the engine says about itself, read now through its collector (every endpoint at
    once, ACCOUNT_TIMEOUT_S each): for callers outside a poller (`sparkops audit`, an A/B run
    that must know what runs). {} when it does not answer, so a hung engine costs one timeout."""
    coll = collector_for(engine.kind)

    async def fetch():
        async with http.async_client(headers=http.POLL_HEADERS) as client:
            return await coll.fetch(client, engine.base_url, timeout=ACCOUNT_TIMEOUT_S, refresh=True)

    snap = coll.snapshot(asyncio.run(fetch()))
    if snap.account is None:
        log.info("%s did not give its account: %s", engine.name, snap.error or snap.status)
    return snap.account or {}


# --- the snapshot ------------------------------------------------------------------------------


def _redact(name, value):
    if isinstance(value, str) and value and SECRET.search(name):
        return "redacted:" + hashlib.sha256(value.encode()).hexdigest()[:12]
    return value


def build_data(engine, unit_cfg, account, *, launch="unit"):
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
        via = {}
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
    observed = {"unit_started_at": started_at}
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


def redact_unit_text(text, secrets=()):
    """A unit file's TEXT as the launch configuration page may show it: the values of secret-looking
    assignments (`Environment=HF_TOKEN=…`), of secret flags (`--api-key K`) and every SECRETS value
    (the effective environment's secret ones, wherever they appear) replaced by "redacted"."""
    for value in sorted((v for v in secrets if len(v) >= 4), key=len, reverse=True):
        text = text.replace(value, "redacted")
    text = _SECRET_QUOTED.sub(lambda m: f'"{m["name"]}=redacted"', text)
    text = _SECRET_BARE.sub(lambda m: f"{m['name']}=redacted", text)
    return _SECRET_FLAG_VALUE.sub(lambda m: f"{m['flag']}{m['sep']}redacted", text)


def _running_flags(from_files, running, env):
    """What runs when the main process was started from an older unit than its files say (edited
    without daemon-reload, or reloaded and not restarted): the flags of its /proc/PID/cmdline,
    each credited to the file that gives the same value, else to the process. The log then writes
    the change when the restart brings it, not when the file was edited."""
    got = flagmodel.parse_argv(from_files.kind, running, env=env, default_origin=OLDER_UNIT)
    for flag, value in got.flags.items():
        if from_files.flags.get(flag) == value and flag in from_files.origins:
            got.origins[flag] = from_files.origins[flag]
    return got


def _redact_argv(argv, secrets):
    """ARGV with the values of secret flags (`--api-key K`, `--api-key=K`) and of secret
    environment variables expanded into it replaced."""
    out, hide_next = [], False
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


def canonical(data):
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


def digest(data):
    return hashlib.sha256(canonical(data).encode()).hexdigest()


def observe_engine(engine, unit_cfg, *, account=None, now=None, launch="unit", process=None):
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


def _keep_file_texts(snap, observed):
    """A snapshot stored before the unit files' text was kept gets it from the next observation
    that finds the same configuration (the text is beside what is hashed, not part of it), so the
    launch configuration page shows the files without waiting for a change."""
    prior = (snap.data or {}).get("observed") or {}
    if observed.get("files") and not prior.get("files"):
        snap.data = {**snap.data, "observed": {**prior, "files": observed["files"]}}
        snap.save(update_fields=["data"])


# --- drift: the log's newest human-written flag lines against what runs ------------------------


def _norm(value):
    text = str(value).strip().replace(",", "").replace("_", "")
    return text.lower()


ACCOUNT_FLAGS = {  # kind -> [(flag, where in the account, what the engine calls it)]
    "vllm": [
        ("--max-model-len", ("max_model_len",), "/v1/models max_model_len"),
        ("--kv-cache-dtype", ("cache_config", "cache_dtype"), "vllm:cache_config_info cache_dtype"),
        (
            "--gpu-memory-utilization",
            ("cache_config", "gpu_memory_utilization"),
            "vllm:cache_config_info gpu_memory_utilization",
        ),
        ("--block-size", ("cache_config", "block_size"), "vllm:cache_config_info block_size"),
    ],
    "sglang": [
        ("--context-length", ("context_length",), "/get_server_info context_length"),
        ("--mem-fraction-static", ("mem_fraction_static",), "/get_server_info mem_fraction_static"),
        ("--kv-cache-dtype", ("kv_cache_dtype",), "/get_server_info kv_cache_dtype"),
    ],
}


def _same(a, b):
    try:
        return float(_norm(a)) == float(_norm(b))
    except ValueError:
        return _norm(a) == _norm(b)


def check_account_drift(engine, data):
    """Fire `config_drift` where the engine's own account disagrees with its argv (a checkpoint
    that bakes `kv_cache_quant_algo: FP8` overrides `--kv-cache-dtype`; a window capped below
    `--max-model-len`); resolve where they agree."""
    from dashboard.alerts.services import external_alert_fire, external_alert_resolve

    running, account = _flags_of(data), (data or {}).get("account") or {}
    for flag, path, name in ACCOUNT_FLAGS.get(engine.kind, ()):
        said = account
        for key in path:
            said = said.get(key) if isinstance(said, dict) else None
        subject = f"{engine.name} account {flag}"
        if flag not in running or said in (None, "", "None"):
            continue
        if _same(flagmodel.render(running[flag]), said):
            external_alert_resolve(rule="config_drift", engine=engine, subject=subject)
            continue
        origin = _origin(data, flag)
        external_alert_fire(
            rule="config_drift",
            severity="warning",
            engine=engine,
            subject=subject,
            cause="engine account",
            message=(
                f"{flag}: the command line says {flagmodel.render(running[flag])} (set in "
                f"{origin or 'the unit'}) but {engine.name} reports {said} ({name})"
            ),
        )


def check_drift(engine, data):
    """Fire `config_drift` for each flag whose newest human-written change-log line (an entry
    naming ENGINE, not written by SparkOps) disagrees with the running value; resolve the others.
    Then the engine's own account against its argv (`check_account_drift`)."""
    from dashboard.alerts.services import external_alert_fire, external_alert_resolve
    from dashboard.changelog.models import FlagChange

    check_account_drift(engine, data)
    running = _flags_of(data)
    lines = (
        FlagChange.objects.filter(entry__engines=engine, flag__startswith="-")
        .exclude(entry__author__isnull=True, entry__author_name=AUTHOR)
        .exclude(entry__body_md__startswith=OBSERVED_MARK)
        .select_related("entry")
        .order_by("-entry__effective_at", "-entry_id", "-position")
    )
    newest = {}
    for line in lines:
        newest.setdefault(line.flag, line)
    for flag, line in newest.items():
        subject = f"{engine.name} {flag}"
        now_value = running.get(flag)
        if now_value is None or _same(line.new, flagmodel.render(now_value)):
            external_alert_resolve(rule="config_drift", engine=engine, subject=subject)
            continue
        origin = _origin(data, flag)
        external_alert_fire(
            rule="config_drift",
            severity="warning",
            engine=engine,
            subject=subject,
            cause=origin.rsplit("/", 1)[-1] if origin else "",
            message=(
                f"{flag}: the change log says {line.new} (entry {line.entry_id}, "
                f"{line.entry.effective_at:%Y-%m-%d %H:%M}) but {engine.name} runs "
                f"{flagmodel.render(now_value)}, set in {origin or 'the unit'}"
            ),
        )


# --- the difference, and the change log ------------------------------------------------------


def _flags_of(data):
    return ((data or {}).get("flags") or {}).get("flags") or {}


def _origin(data, flag):
    return (((data or {}).get("flags") or {}).get("origins") or {}).get(flag, "")


def diff(before, after):
    """[(name, old, new, file that set the new value)] between two snapshots' data: the flags,
    the model, the unit's directives, its readiness helper and ordering, the environment."""
    lines = []
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
    old_post = [" ".join(c.get("argv") or []) for c in old_u.get("exec_start_post") or []]
    new_post = [" ".join(c.get("argv") or []) for c in new_u.get("exec_start_post") or []]
    if old_post != new_post:
        lines.append(
            (
                "ExecStartPost=",
                "; ".join(old_post),
                "; ".join(new_post),
                ((new_u.get("exec_start_post") or [{}])[-1] or {}).get("file", ""),
            )
        )
    for edge in unitconfig.EDGES:
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


def _render(value):
    return "(unset)" if value is None else flagmodel.render(value)


def line_text(name, old, new, origin):
    return f"`{name}`: {old} → {new}" + (f" (set in {origin})" if origin else "")


def log_change(engine, snap, lines, *, now):
    """The observed change-log entry for LINES (the change log's own service writes it)."""
    from dashboard.changelog.grammar import EvidenceLine, FlagLine
    from dashboard.changelog.models import AppendOnlyError
    from dashboard.changelog.services import entry_create

    shown = [f"{n} {o} → {v}" for n, o, v, _ in lines[:2]]
    title = f"Observed on {engine.name}: " + "; ".join(shown) + (f" (+{len(lines) - 2} more)" if len(lines) > 2 else "")
    body = [
        f"{OBSERVED_MARK} in what runs (`systemctl show`/`cat` of the unit, its environment, "
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
    evidence = []
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


def is_observed(entry):
    """Whether a change-log entry was written by this module rather than by a person."""
    return (entry.author_id is None and entry.author_name == AUTHOR) or entry.body_md.startswith(OBSERVED_MARK)


def latest_snapshot(engine):
    return ConfigSnapshot.objects.filter(engine=engine).order_by("-observed_at", "-id").first()


def observe_now(engine):
    """ENGINE's configuration snapshot as of now: its unit and account read this moment, a new
    snapshot stored when they hash differently. None when its unit cannot be read now or it has
    no unit (what runs is then not known, and an older snapshot would not say). For callers that
    must know what runs before they measure it (A/B experiments), outside the poller's cadence."""
    if not engine.unit:
        return None
    unit_cfg = unitconfig.read_units([engine]).get(engine.pk)
    if unit_cfg is None or unit_cfg.get("error"):
        return None
    observe_engine(engine, unit_cfg, account=fetch_account(engine) or None)
    return latest_snapshot(engine)
