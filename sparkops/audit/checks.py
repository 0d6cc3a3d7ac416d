"""The playbook's checks of a launch configuration, one class each, registered in CHECKS in the
order the audit runs them: each reads an engine's (or the box's engines') latest snapshot and says
pass / warn / fail with the evidence and the fix."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from dashboard.bounds import Bounds
from sparkops.collectors import flags as flagmodel
from sparkops.collectors.handrun import is_engine_launch
from sparkops.collectors.systemd import STOP_HOOK
from sparkops.collectors.unitconfig import memory_bytes, timespan_s
from sparkops.gate.waitready import START_MARGIN_S

from .base import (
    Check,
    Data,
    DropIn,
    Result,
    Snapshots,
    Verdict,
    file_note,
    sparkops_executable,
    systemctl_for,
    unit_of,
)

if TYPE_CHECKING:
    from dashboard.models import Engine

C = TypeVar("C", bound=type[Check])

CHECKS: dict[str, Check] = {}
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
CAPS = ("MAX_JOBS", "NVCC_THREADS", "TORCHINDUCTOR_COMPILE_THREADS", "FLASHINFER_NVCC_THREADS")


def not_running(engine: Engine, data: Data, names: Iterable[str], *, in_unit: str) -> tuple[str, str, str] | None:
    """The "applied, takes effect at the next restart" finding of a check that passed on the unit's
    files (IN_UNIT: what they say) while the main process started without NAMES as they say
    (/proc/PID/environ, `environment_not_running` of the snapshot): (status, evidence, fix), or None
    when what runs has them (issue 47: the audit passed the caps a running engine did not have)."""
    u = unit_of(data)
    pending = {n: v for n, v in (u.get("environment_not_running") or {}).items() if n in names}
    if not pending:
        return None
    unit = u.get("unit") or getattr(engine, "unit", "")
    runs = ", ".join(f"{n} {'unset' if v is None else v}" for n, v in sorted(pending.items()))
    restart = f"{systemctl_for(engine)} restart {unit}"
    return (
        "applied",
        f"in the unit: {in_unit}; not yet in what runs (its main process's /proc/PID/environ: {runs}): "
        f"applied, takes effect at the next restart (`{restart}`)",
        f"Restart it when a restart suits: `{restart}`",
    )


def register(cls: C) -> C:
    CHECKS[cls.key] = cls()
    return cls


# docs/field-notes.md §8: a crash loop ends `failed` after 3 starts in an hour, visible, instead of looping.
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
    DEFAULTS: ClassVar[dict] = {"max_burst": 5}
    BOUNDS: ClassVar[dict] = {"max_burst": Bounds(1, 100)}
    dropin = RESTART_DROPIN
    fix = (
        "An engine can die fatally and hand systemd a clean exit (Restart=on-failure never fires): add the drop-in "
        f"{RESTART_DROPIN.name}: {RESTART_DROPIN.inline()}"
    )

    def engine(self, engine: Engine, data: Data, s: dict[str, Any]) -> Verdict:
        u = unit_of(data)
        if not u:
            return None
        restart, burst = u.get("restart") or "no", u.get("start_limit_burst")
        interval = timespan_s(u.get("start_limit_interval_usec"))
        where = file_note(data, "Restart")
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
        counted = starts_within(engine, interval)
        if counted is not None and counted > burst:
            return "warn", (
                f"Restart=always, StartLimitBurst={burst} per {u.get('start_limit_interval_usec')}, yet SparkOps "
                f"recorded {counted} starts of it in the last {u.get('start_limit_interval_usec')}: systemd's "
                "start-limit counter was reset (every daemon-reload resets it, `sparkops unit fix --apply` on any "
                "engine of the box included), so the bound did not hold: find why it restarts"
            )
        return "pass", f"Restart=always{where}, StartLimitBurst={burst} per {u.get('start_limit_interval_usec')}"


def starts_within(engine: Engine, interval_s: float | None) -> int | None:
    """How many starts of ENGINE SparkOps recorded (its EngineStart rows, failed ones included) in the
    last INTERVAL_S seconds, by the database's clock; None for an engine not stored. systemd's own
    count forgets every start at a daemon-reload (issue 47 item 9), these rows do not."""
    if not getattr(engine, "pk", None) or not interval_s or interval_s == float("inf"):
        return None
    from dashboard.clock import db_now
    from dashboard.models import EngineStart

    since = db_now() - timedelta(seconds=interval_s)
    return EngineStart.objects.filter(engine_id=engine.pk, started_at__gte=since).count()


@register
class CompileCaps(Check):
    key = "compile_caps"
    title = "Compile caps in the effective environment"
    DEFAULTS: ClassVar[dict] = {
        "max_jobs": 4,
        "nvcc_threads": 1,
        "torchinductor_compile_threads": 4,
        "flashinfer_nvcc_threads": 1,
    }
    BOUNDS: ClassVar[dict] = {
        "max_jobs": Bounds(1, 256),
        "nvcc_threads": Bounds(1, 64),
        "torchinductor_compile_threads": Bounds(1, 256),
        "flashinfer_nvcc_threads": Bounds(1, 64),
    }
    fix = (
        "A cold JIT cache spawns nproc+2 compilers at 3-6 GiB each: set Environment=MAX_JOBS=4 NVCC_THREADS=1 "
        "TORCHINDUCTOR_COMPILE_THREADS=4 FLASHINFER_NVCC_THREADS=1 in the unit, and export them in every "
        "launch script a person runs by hand"
    )

    def engine(self, engine: Engine, data: Data, s: dict[str, Any]) -> Verdict:
        hand_run = (data or {}).get("launch") == "hand-run"
        if engine.kind not in JIT_KINDS or not (unit_of(data) or hand_run):
            return None  # every launch path: the unit's environment, or the shell's a hand-run engine had
        env = data.get("environment") or {}
        missing, over = [], []
        for name in CAPS:
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
        evidence = ", ".join(f"{n}={env[n]}" for n in ("MAX_JOBS", "NVCC_THREADS")) + (
            f" (set in {origins.get('MAX_JOBS')})" if origins.get("MAX_JOBS") else ""
        )
        return not_running(engine, data, CAPS, in_unit=evidence) or ("pass", evidence)


@register
class CudaPath(Check):
    key = "cuda_on_path"
    title = "CUDA bin on PATH and CUDA_HOME"
    DEFAULTS: ClassVar[dict] = {"cuda_bin": "/usr/local/cuda/bin"}
    fix = (
        "FlashInfer needs nvcc at engine init; a compiler on PATH in a shell and absent under systemd makes the "
        'same command line fail as a unit: Environment="PATH=/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin" '
        "CUDA_HOME=/usr/local/cuda"
    )

    def engine(self, engine: Engine, data: Data, s: dict[str, Any]) -> Verdict:
        if engine.kind not in JIT_KINDS or not unit_of(data):
            return None
        env = data.get("environment") or {}
        path = env.get("PATH") or "(systemd's default) /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
        on_path = s["cuda_bin"].rstrip("/") in [
            p.rstrip("/") for p in path.replace("(systemd's default) ", "").split(":")
        ]
        problems = ([] if on_path else [f"PATH={path} lacks {s['cuda_bin']}"]) + (
            [] if env.get("CUDA_HOME") else ["CUDA_HOME unset"]
        )
        if problems:
            return "fail", "; ".join(problems)
        evidence = f"PATH has {s['cuda_bin']}, CUDA_HOME={env['CUDA_HOME']}"
        return not_running(engine, data, ("PATH", "CUDA_HOME"), in_unit=evidence) or ("pass", evidence)


def helper_budget_s(argv: list[str]) -> float | None:
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
    DEFAULTS: ClassVar[dict] = {"margin_s": 60}
    BOUNDS: ClassVar[dict] = {"margin_s": Bounds(0, 3600)}
    fix = (
        "Hold the unit in activating until the engine serves: ExecStartPost=/ABSOLUTE/PATH/sparkops wait-ready "
        "--url URL --kind KIND --budget BUDGET, which exits 1 when $MAINPID dies or the budget runs out (wall "
        "clock), with BUDGET + a margin below TimeoutStartSec"
    )

    def engine(self, engine: Engine, data: Data, s: dict[str, Any]) -> Verdict:
        res = self._judge(engine, data, s)
        if res is None or res[0] == "pass":
            return res
        url = getattr(engine, "url", "") or "URL"
        helper = f"{sparkops_executable()} wait-ready --url {url} --kind {engine.kind} --budget BUDGET"
        return (
            *res,
            f"Hold the unit in activating until the engine serves: ExecStartPost={helper} (exit 1 when $MAINPID "
            f"dies, when the budget runs out, or while another process holds its port), with BUDGET + "
            f"{s['margin_s']} s at most TimeoutStartSec; `sparkops unit fix {engine.name} --check {self.key}` "
            "writes it with a budget from the measured starts",
        )

    def _judge(self, engine: Engine, data: Data, s: dict[str, Any]) -> Verdict:
        u = unit_of(data)
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
        margin = max(s["margin_s"], START_MARGIN_S)  # below the gate's own, the gate refuses the start
        if timeout is not None and budget + margin > timeout:
            return "fail", (
                f"ExecStartPost={shown}: budget {budget:g} s + margin {margin:g} s is past "
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

    def engine(self, engine: Engine, data: Data, s: dict[str, Any]) -> Verdict:
        u = unit_of(data)
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

    def box(self, snapshots: Snapshots, s: dict[str, Any]) -> list[Result]:
        out = []
        items = [(e, d) for e, d in snapshots if unit_of(d).get("unit")]
        for i, (a, da) in enumerate(items):
            for b, db in items[i + 1 :]:
                ua, ub = unit_of(da)["unit"], unit_of(db)["unit"]
                edge = ub in ((unit_of(da).get("edges") or {}).get("After") or []) or ua in (
                    (unit_of(db).get("edges") or {}).get("After") or []
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

    def engine(self, engine: Engine, data: Data, s: dict[str, Any]) -> Verdict:
        u = unit_of(data)
        if not u:
            return None
        high, cap = memory_bytes(u.get("memory_high")), memory_bytes(u.get("memory_max"))
        if cap is None:
            return "fail", f"MemoryMax={u.get('memory_max') or 'infinity'}" + (
                f", MemoryHigh={high / (1 << 30):.0f}G only" if high else ""
            )
        return "pass", f"MemoryMax={cap / (1 << 30):.0f}G{file_note(data, 'MemoryMax')}"


def memory_share(engine: Engine, data: Data | None) -> float | None:
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
    DEFAULTS: ClassVar[dict] = {"headroom": 0.15}
    BOUNDS: ClassVar[dict] = {"headroom": Bounds(0.0, 0.9)}
    fix = (
        "Each engine reserves its share of the one unified pool at boot: lower --gpu-memory-utilization / "
        "--mem-fraction-static so the shares sum to at most 1 - headroom"
    )

    def box(self, snapshots: Snapshots, s: dict[str, Any]) -> list[Result]:
        read = [(e.name, memory_share(e, d)) for e, d in snapshots]
        shares = [(n, v) for n, v in read if v is not None]
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


def argv_differences(
    kind: str, running: list[str], files: list[str], origins: list[str] | None = None
) -> list[tuple[str, str, str, str]]:
    """[(flag, running value, the files' value, the file that says it)] between two argvs of one
    engine, parsed with its argument model (a flag moved or spelled `--flag=value` is the same
    flag); "model" for the model. ORIGINS: the file of each word of FILES."""

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

    def engine(self, engine: Engine, data: Data, s: dict[str, Any]) -> Verdict:

        u = unit_of(data)
        start = u.get("exec_start") or {}
        running, files = u.get("running_argv"), start.get("argv")
        if engine.kind not in ("vllm", "llamacpp", "sglang") or not u or not running or not files:
            return None
        if not is_engine_launch(running):
            return None  # a process that renamed itself (setproctitle): its argv says nothing
        differ = argv_differences(engine.kind, running, files, start.get("origins"))
        stale = u.get("need_daemon_reload")
        env_pending = u.get("environment_not_running") or {}
        if not differ and env_pending:
            return not_running(
                engine, data, set(env_pending), in_unit=f"its Environment= sets {', '.join(sorted(env_pending))}"
            )
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
        ctl = systemctl_for(engine)
        return (
            "fail",
            f"the running engine was started from an older unit: these flags differ: {lines} ({why})",
            f"What runs is not what the unit's files say, so the next restart (or reboot) changes flags nobody "
            f"restarted for: `{ctl} daemon-reload && {ctl} restart {u.get('unit') or engine.unit}` (or revert the edit)",
        )


def stop_posts(files: Iterable[dict[str, Any]]) -> list[str]:
    """The ExecStopPost= command lines in force from a unit's FILES ([{path, text}] in the order
    systemd reads them): each assignment appends, an empty one clears the list."""
    posts: list[str] = []
    for f in files:
        section = ""
        for raw in (f.get("text") or "").splitlines():
            line = raw.strip()
            if line.startswith("["):
                section = line
            elif section == "[Service]" and line.startswith("ExecStopPost="):
                value = line.partition("=")[2].strip()
                posts = [*posts, value] if value else []
    return posts


@register
class StopHook(Check):
    key = "stop_hook"
    title = "Its stop is told to the box's worker"
    fix = (
        "Add ExecStopPost=/abs/path/python -m sparkops.controls.stopped --socket SOCKET %n: systemd's verdict on every stop "
        "($SERVICE_RESULT, $EXIT_CODE, $EXIT_STATUS) reaches the box's worker as one local datagram, so the page "
        "carries its cause without the worker asking systemd; the hook never fails the unit"
    )

    def engine(self, engine: Engine, data: Data, s: dict[str, Any]) -> Verdict:
        files = ((data or {}).get("observed") or {}).get("files") or []
        if not unit_of(data) or not files:
            return None  # no unit, or its files not read: nothing to say
        hooks = [c for c in stop_posts(files) if STOP_HOOK.search(c)]
        if hooks:
            return "pass", f"ExecStopPost={hooks[-1]}"
        return "warn", (
            "no ExecStopPost= stop hook: the worker learns of a death from its pidfd or its probe, "
            "then asks systemd why"
        )
