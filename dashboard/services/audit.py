"""The launch configuration audited against the playbook (../shared/reference: the field reports).

Each check is a small class in CHECKS (registered like the alert rules) with DEFAULTS, its
editable thresholds (`sparkops audit --set compile_caps.max_jobs=8`), reading the engines' latest
`ConfigSnapshot`s and returning `Result`s: pass / warn / fail, the evidence line (what the unit
or environment says, and which file said it) and the fix. Advisories are findings, never
firing alerts: they show on the audit page and as a badge on the engine card."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from dashboard.collectors.unitconfig import memory_bytes, timespan_s

CHECKS: dict[str, Check] = {}
ORDER = {"fail": 0, "warn": 1, "pass": 2}
GOOD_FILE_STATES = {
    "enabled",
    "enabled-runtime",
    "static",
    "alias",
    "indirect",
    "generated",
    "linked",
    "linked-runtime",
}
JIT_KINDS = ("vllm", "sglang")


def register(cls):
    CHECKS[cls.key] = cls()
    return cls


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
    DEFAULTS: dict = {}
    BOUNDS: dict = {}  # threshold -> (lowest, highest) for numbers; strings: LIMITS below
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


def _unit(data):
    return (data or {}).get("unit") or {}


def _file(data, directive):
    path = (_unit(data).get("directive_files") or {}).get(directive)
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


# The field reports' bound: a crash loop ends `failed` after 3 starts in an hour, visible, instead of looping.
RESTART_DROPIN = DropIn(
    "50-sparkops-restart_always_bounded.conf",
    (
        ("Unit", (("StartLimitIntervalSec", "3600"), ("StartLimitBurst", "3"))),
        ("Service", (("Restart", "always"), ("RestartSec", "10"))),
    ),
)


@register
class RestartBounded(Check):
    key = "restart_always_bounded"
    title = "Restart=always, bounded by StartLimitBurst"
    DEFAULTS = {"max_burst": 5}
    BOUNDS = {"max_burst": (1, 100)}
    dropin = RESTART_DROPIN
    fix = (
        "An engine can die fatally and hand systemd a clean exit (Restart=on-failure never fires): add the drop-in "
        f"{RESTART_DROPIN.name}: {RESTART_DROPIN.inline()}"
    )

    def engine(self, engine, data, s):
        u = _unit(data)
        if not u:
            return None
        restart, burst = u.get("restart") or "no", u.get("start_limit_burst")
        interval = timespan_s(u.get("start_limit_interval_usec"))
        where = _file(data, "Restart")
        if restart != "always":
            return "fail", f"Restart={restart}{where}: an engine that exits 0 after a fatal error stays down"
        if not burst or not interval:
            return (
                "fail",
                f"Restart=always with StartLimitBurst={burst} StartLimitIntervalUSec={u.get('start_limit_interval_usec')}: a crash loop is unbounded",
            )
        if burst > s["max_burst"]:
            return (
                "warn",
                f"Restart=always, StartLimitBurst={burst} (more than {s['max_burst']}) per {u.get('start_limit_interval_usec')}",
            )
        return "pass", f"Restart=always{where}, StartLimitBurst={burst} per {u.get('start_limit_interval_usec')}"


@register
class CompileCaps(Check):
    key = "compile_caps"
    title = "Compile caps in the effective environment"
    DEFAULTS = {"max_jobs": 4, "nvcc_threads": 1, "torchinductor_compile_threads": 4, "flashinfer_nvcc_threads": 1}
    BOUNDS = {
        "max_jobs": (1, 256),
        "nvcc_threads": (1, 64),
        "torchinductor_compile_threads": (1, 256),
        "flashinfer_nvcc_threads": (1, 64),
    }
    fix = (
        "A cold JIT cache spawns nproc+2 compilers at 3-6 GiB each: set Environment=MAX_JOBS=4 NVCC_THREADS=1 "
        "TORCHINDUCTOR_COMPILE_THREADS=4 FLASHINFER_NVCC_THREADS=1 in the unit, and export them in every "
        "launch script a person runs by hand"
    )

    def engine(self, engine, data, s):
        hand_run = (data or {}).get("launch") == "hand-run"
        if engine.kind not in JIT_KINDS or not (_unit(data) or hand_run):
            return None  # every launch path: the unit's environment, or the shell's a hand-run engine had
        env = data.get("environment") or {}
        missing, over = [], []
        for name in ("MAX_JOBS", "NVCC_THREADS", "TORCHINDUCTOR_COMPILE_THREADS", "FLASHINFER_NVCC_THREADS"):
            limit = s[name.lower()]
            value = env.get(name)
            if value is None:
                missing.append(name)
            elif not str(value).isdigit() or int(value) > limit:
                over.append(f"{name}={value} (cap {limit})")
        if missing or over:
            where = " in the environment of a hand-run engine (no unit)" if hand_run else ""
            return "fail", "; ".join(([f"unset: {', '.join(missing)}{where}"] if missing else []) + over)
        origins = data.get("environment_origins") or {}
        return "pass", ", ".join(f"{n}={env[n]}" for n in ("MAX_JOBS", "NVCC_THREADS")) + (
            f" (set in {origins.get('MAX_JOBS')})" if origins.get("MAX_JOBS") else ""
        )


@register
class CudaPath(Check):
    key = "cuda_on_path"
    title = "CUDA bin on PATH and CUDA_HOME"
    DEFAULTS = {"cuda_bin": "/usr/local/cuda/bin"}
    fix = (
        "FlashInfer needs nvcc at engine init; a compiler on PATH in a shell and absent under systemd makes the "
        'same command line fail as a unit: Environment="PATH=/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin" '
        "CUDA_HOME=/usr/local/cuda"
    )

    def engine(self, engine, data, s):
        if engine.kind not in JIT_KINDS or not _unit(data):
            return None
        env = data.get("environment") or {}
        path = env.get("PATH") or "(systemd's default) /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
        on_path = s["cuda_bin"].rstrip("/") in [
            p.rstrip("/") for p in path.replace("(systemd's default) ", "").split(":")
        ]
        problems = ([] if on_path else [f"PATH={path} lacks {s['cuda_bin']}"]) + (
            [] if env.get("CUDA_HOME") else ["CUDA_HOME unset"]
        )
        return (
            ("fail", "; ".join(problems))
            if problems
            else ("pass", f"PATH has {s['cuda_bin']}, CUDA_HOME={env['CUDA_HOME']}")
        )


def helper_budget_s(argv):
    """A readiness helper's budget: `--budget N` (`sparkops wait-ready --url … --budget 1080`), else its
    last number argument (`wait-ready 8012 1080` → 1080)."""
    for i, word in enumerate(argv):
        raw = argv[i + 1] if word == "--budget" and i + 1 < len(argv) else word.partition("=")[2]
        if word == "--budget" or word.startswith("--budget="):
            try:
                return float(raw)
            except ValueError:
                return None
    numbers = [w for w in argv[1:] if re.fullmatch(r"\d+(\.\d+)?", w)]
    return float(numbers[-1]) if numbers else None


@register
class Readiness(Check):
    key = "readiness_budget"
    title = "Readiness helper within TimeoutStartSec"
    DEFAULTS = {"margin_s": 60}
    BOUNDS = {"margin_s": (0, 3600)}
    fix = (
        "Hold the unit in activating until the engine serves: ExecStartPost=wait-ready PORT BUDGET that exits 1 "
        "when $MAINPID dies or the budget runs out, counting wall clock, with BUDGET + a margin below TimeoutStartSec"
    )

    def engine(self, engine, data, s):
        u = _unit(data)
        if not u:
            return None
        timeout = timespan_s(u.get("timeout_start_usec"))
        posts = u.get("exec_start_post") or []
        if not posts:
            if u.get("type") == "notify":
                return "pass", "Type=notify"
            return (
                "warn",
                f"no ExecStartPost readiness helper (Type={u.get('type')}): dependents start before it serves",
            )
        argv = posts[-1].get("argv") or []
        budget = helper_budget_s(argv)
        shown = " ".join(argv)
        if budget is None:
            return (
                "warn",
                f"ExecStartPost={shown}: no budget argument to compare with TimeoutStartUSec={u.get('timeout_start_usec')}",
            )
        if timeout is not None and budget + s["margin_s"] > timeout:
            return "fail", (
                f"ExecStartPost={shown}: budget {budget:g} s + margin {s['margin_s']} s is past "
                f"TimeoutStartUSec={u.get('timeout_start_usec')} ({timeout:g} s)"
            )
        return (
            "pass",
            f"ExecStartPost={shown}: budget {budget:g} s within TimeoutStartUSec={u.get('timeout_start_usec')}",
        )


@register
class OrderingEnabled(Check):
    key = "after_enabled_units"
    title = "After= edges name enabled units"
    fix = (
        "After= only orders units in the same boot transaction: a disabled or removed unit orders nothing at boot. "
        "Order after a unit that is enabled (systemctl enable it), or remove the stale edge"
    )

    def engine(self, engine, data, s):
        u = _unit(data)
        if not u:
            return None
        states = u.get("edge_states") or {}
        dead = []
        for name in (u.get("edges") or {}).get("After") or []:
            st = states.get(name) or {}
            if (
                st.get("LoadState") not in ("loaded", None, "")
                or (st.get("UnitFileState") or "") not in GOOD_FILE_STATES
            ):
                dead.append(f"{name}: {st.get('LoadState') or '?'}/{st.get('UnitFileState') or 'not installed'}")
        files = ", ".join((u.get("edge_files") or {}).get("After") or [])
        if dead:
            return "fail", f"After= ({files}) names " + "; ".join(dead)
        after = (u.get("edges") or {}).get("After") or []
        return "pass", ("After=" + " ".join(after)) if after else "no After= edges"


@register
class ColdStartsSerialized(Check):
    key = "cold_starts_serialized"
    title = "Cold starts serialized"
    scope = "box"
    fix = (
        "Two cold compile storms do not fit in one box: order the units one after the other (After= the other "
        "engine's unit, ordering only) behind a readiness helper that fails honestly"
    )

    def box(self, snapshots, s):
        out = []
        items = [(e, d) for e, d in snapshots if _unit(d).get("unit")]
        for i, (a, da) in enumerate(items):
            for b, db in items[i + 1 :]:
                ua, ub = _unit(da)["unit"], _unit(db)["unit"]
                edge = ub in ((_unit(da).get("edges") or {}).get("After") or []) or ua in (
                    (_unit(db).get("edges") or {}).get("After") or []
                )
                subject = f"{a.name} + {b.name}"
                if edge:
                    out.append(Result(self.key, self.title, subject, "pass", f"{ua} and {ub} are ordered"))
                else:
                    out.append(
                        Result(
                            self.key,
                            self.title,
                            subject,
                            "fail",
                            f"no After= edge between {ua} and {ub}: cold starts not serialized",
                            self.fix,
                        )
                    )
        return out


@register
class MemoryMaxSet(Check):
    key = "memory_max_set"
    title = "MemoryMax set"
    fix = (
        "MemoryHigh alone throttles and reclaims; it does not stop a runaway compile from driving the box into a "
        "global OOM: add MemoryMax= (e.g. 112G) so the unit is killed instead of the box"
    )

    def engine(self, engine, data, s):
        u = _unit(data)
        if not u:
            return None
        high, cap = memory_bytes(u.get("memory_high")), memory_bytes(u.get("memory_max"))
        if cap is None:
            return "fail", f"MemoryMax={u.get('memory_max') or 'infinity'}" + (
                f", MemoryHigh={high / (1 << 30):.0f}G only" if high else ""
            )
        return "pass", f"MemoryMax={cap / (1 << 30):.0f}G{_file(data, 'MemoryMax')}"


def memory_share(engine, data):
    f = ((data or {}).get("flags") or {}).get("flags") or {}
    raw = (
        f.get("--gpu-memory-utilization")
        if engine.kind == "vllm"
        else f.get("--mem-fraction-static")
        if engine.kind == "sglang"
        else None
    )
    try:
        return float(raw) if raw is not None else (0.9 if engine.kind == "vllm" and f else None)
    except (TypeError, ValueError):
        return None


@register
class MemoryShareSum(Check):
    key = "memory_share_sum"
    title = "Memory shares fit with headroom"
    scope = "box"
    DEFAULTS = {"headroom": 0.15}
    BOUNDS = {"headroom": (0.0, 0.9)}
    fix = (
        "Each engine reserves its share of the one unified pool at boot: lower --gpu-memory-utilization / "
        "--mem-fraction-static so the shares sum to at most 1 - headroom"
    )

    def box(self, snapshots, s):
        shares = [(e.name, memory_share(e, d)) for e, d in snapshots]
        shares = [(n, v) for n, v in shares if v is not None]
        if not shares:
            return []
        total, limit = sum(v for _, v in shares), 1 - s["headroom"]
        evidence = " + ".join(f"{n} {v:g}" for n, v in shares) + f" = {total:.2f} (limit {limit:.2f})"
        return [
            Result(
                self.key,
                self.title,
                "box",
                "fail" if total > limit + 1e-9 else "pass",
                evidence,
                self.fix if total > limit + 1e-9 else "",
            )
        ]


def argv_differences(kind, running, files, origins=None):
    """[(flag, running value, the files' value, the file that says it)] between two argvs of one
    engine, parsed with its argument model (a flag moved or spelled `--flag=value` is the same
    flag); "model" for the model. ORIGINS: the file of each word of FILES."""
    from dashboard.collectors import flags as flagmodel

    a, b = flagmodel.parse_argv(kind, running), flagmodel.parse_argv(kind, files, origins=origins)
    out = [("model", a.model or "(none)", b.model or "(none)", "")] if a.model != b.model else []
    for flag in sorted(set(a.flags) | set(b.flags)):
        if a.flags.get(flag) != b.flags.get(flag):
            out.append(
                (
                    flag,
                    flagmodel.render(a.flags[flag]) if flag in a.flags else "(unset)",
                    flagmodel.render(b.flags[flag]) if flag in b.flags else "(unset)",
                    b.origins.get(flag, ""),
                )
            )
    return out


@register
class RunsItsUnit(Check):
    key = "running_matches_unit"
    title = "The running engine was started from its unit as the files say"
    fix = (
        "What runs is not what the unit's files say, so the next restart (or reboot) changes flags nobody "
        "restarted for: `systemctl daemon-reload` then `systemctl restart` the unit (or revert the edit)"
    )

    def engine(self, engine, data, s):
        from dashboard.collectors.handrun import is_engine_launch

        u = _unit(data)
        start = u.get("exec_start") or {}
        running, files = u.get("running_argv"), start.get("argv")
        if engine.kind not in ("vllm", "llamacpp", "sglang") or not u or not running or not files:
            return None
        if not is_engine_launch(running):
            return None  # a process that renamed itself (setproctitle): its argv says nothing
        differ = argv_differences(engine.kind, running, files, start.get("origins"))
        stale = u.get("need_daemon_reload")
        if not differ:
            if stale:
                return "warn", (
                    "NeedDaemonReload=yes: the unit's files changed since systemd loaded them (the running "
                    "flags still match them; an environment or ordering edit waits for a daemon-reload)"
                )
            return "pass", f"/proc/PID/cmdline is the unit's ExecStart ({len(files)} words)"
        lines = "; ".join(
            f"{flag} runs {old}, the files say {new}" + (f" (set in {origin})" if origin else "")
            for flag, old, new, origin in differ
        )
        why = (
            "NeedDaemonReload=yes: edited without `systemctl daemon-reload`"
            if stale
            else "reloaded but not restarted since"
        )
        return "fail", f"the running engine was started from an older unit: these flags differ: {lines} ({why})"


# --- thresholds: defaults, a box's stored values, one run's --set -------------------------------

STRING_MAX = 200
TYPE_NAMES = {int: "a whole number", float: "a number", str: "text"}


def thresholds():
    """[(check key, threshold, default, (low, high) or None)] of every check, in order."""
    return [(k, f, d, c.BOUNDS.get(f)) for k, c in CHECKS.items() for f, d in c.DEFAULTS.items()]


def threshold_value(key, field, raw):
    """RAW (text, or a number) as threshold FIELD of check KEY: its default's type, within its
    bounds; ValueError with a sentence an operator can act on."""
    if key not in CHECKS or field not in CHECKS[key].DEFAULTS:
        known = ", ".join(f"{k}.{f}" for k, f, _, _ in thresholds())
        raise ValueError(f"{key}.{field} is not a threshold; thresholds: {known}")
    default, bounds = CHECKS[key].DEFAULTS[field], CHECKS[key].BOUNDS.get(field)
    kind = type(default)
    text = str(raw).strip()
    if kind is str:
        if not text or len(text) > STRING_MAX:
            raise ValueError(f"{field} takes text of 1 to {STRING_MAX} characters")
        if field == "cuda_bin" and not text.startswith("/"):
            raise ValueError(f"{field} is an absolute directory, e.g. /usr/local/cuda/bin")
        return text
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"{field} takes {TYPE_NAMES[kind]} (got {text!r})") from None
    if kind is float and value != value:  # NaN compares with nothing
        raise ValueError(f"{field} takes {TYPE_NAMES[kind]} (got {text!r})")
    if bounds and not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{field} must be between {bounds[0]:g} and {bounds[1]:g} (got {value:g})")
    return value


def parse_overrides(pairs):
    """['compile_caps.max_jobs=8'] → {'compile_caps': {'max_jobs': 8}}; ValueError names a bad one."""
    out: dict = {}
    for pair in pairs or ():
        name, sep, raw = pair.partition("=")
        key, dot, field = name.partition(".")
        if not sep or not dot or key not in CHECKS or field not in CHECKS[key].DEFAULTS:
            known = ", ".join(f"{k}.{f}" for k, c in CHECKS.items() for f in c.DEFAULTS)
            raise ValueError(f"{pair!r} is not CHECK.THRESHOLD=VALUE; thresholds: {known}")
        try:
            value = threshold_value(key, field, raw)
        except ValueError as exc:
            raise ValueError(f"{pair!r}: {exc}") from None
        out.setdefault(key, {})[field] = value
    return out


def stored_overrides(host_id):
    """The box's stored thresholds as overrides ({check: {threshold: value}}). A stored value the
    code no longer takes (a check renamed, bounds narrowed) is left out, and its check runs on its
    default: an old row never breaks the audit."""
    from dashboard.models import AuditThreshold

    out: dict = {}
    for row in AuditThreshold.objects.filter(host_id=host_id):
        try:
            out.setdefault(row.check_key, {})[row.name] = threshold_value(row.check_key, row.name, row.value)
        except ValueError:
            continue
    return out


def thresholds_save(*, host, values, user=None):
    """Store VALUES ({(check, threshold): typed value}) for HOST: a value equal to its default
    removes the row (the box follows the default again). All or nothing; returns the changed keys."""
    from django.db import transaction

    from dashboard.models import AuditThreshold

    changed = []
    with transaction.atomic():
        current = {(r.check_key, r.name): r for r in AuditThreshold.objects.select_for_update().filter(host=host)}
        for (key, field), value in values.items():
            value = threshold_value(key, field, value)
            row = current.get((key, field))
            if value == CHECKS[key].DEFAULTS[field]:
                if row is not None:
                    row.delete()
                    changed.append(f"{key}.{field}")
                continue
            if row is None:
                AuditThreshold.objects.create(host=host, check_key=key, name=field, value=str(value), updated_by=user)
            elif row.value != str(value):
                row.value, row.updated_by = str(value), user
                row.save(update_fields=["value", "updated_by", "updated_at"])
            else:
                continue
            changed.append(f"{key}.{field}")
    return changed


def effective_thresholds(host_id, overrides=None):
    """{check: {threshold: value}} in force for a box: defaults, then its stored values, then OVERRIDES."""
    stored = stored_overrides(host_id) if host_id is not None else {}
    return {
        key: {**c.DEFAULTS, **stored.get(key, {}), **((overrides or {}).get(key) or {})} for key, c in CHECKS.items()
    }


def snapshots_of(engines):
    """[(engine, its latest snapshot's data)] for those of ENGINES that have one: two queries
    for any number of engines."""
    from django.db.models import OuterRef, Subquery

    from dashboard.models import ConfigSnapshot, Engine

    engines = list(engines)
    newest = ConfigSnapshot.objects.filter(engine=OuterRef("pk")).order_by("-observed_at", "-id").values("id")[:1]
    ids = dict(
        Engine.objects.filter(pk__in=[e.pk for e in engines]).annotate(snap=Subquery(newest)).values_list("pk", "snap")
    )
    snaps = ConfigSnapshot.objects.in_bulk([i for i in ids.values() if i is not None])
    return [(e, snaps[ids[e.pk]].data) for e in engines if ids.get(e.pk) in snaps]


def concerns(result, engine):
    """Whether RESULT is about ENGINE: its own, a pair it is in, or the box's."""
    return result.subject in (engine.name, "box") or engine.name in result.subject.split(" + ")


def audit(engines, *, overrides=None, only_engine=None):
    """Every check over ENGINES (one box's), worst first, with the box's stored thresholds and
    OVERRIDES (one run's) over them. ONLY_ENGINE: that engine's results (box-wide checks: those
    naming it)."""
    engines = list(engines)
    snaps = snapshots_of(engines)
    in_force = effective_thresholds(getattr(engines[0], "host_id", None) if engines else None, overrides)
    results = []
    for key, check in CHECKS.items():
        results += check.run(snaps, settings=in_force[key])
    if only_engine is not None:
        results = [r for r in results if concerns(r, only_engine)]
    return sorted(results, key=lambda r: (ORDER[r.status], r.subject, r.check))


def audit_host(host, *, overrides=None):
    from dashboard.models import Engine

    engines = list(Engine.objects.filter(host=host, retired_at__isnull=True).order_by("name"))
    return audit(engines, overrides=overrides)
