"""`sparkops launch [options] -- ENGINE ARGV…`: the guarded launch path (the launch script of
docs/field-notes.md §5 that exports the caps and refuses to start beside a running engine, as a program).

1. The compile caps: the audit's thresholds in force for this box (`compile_caps`) go into the
   engine's environment, for vLLM, SGLang and llama-server alike; a lower value already set is kept.
2. One cold start at a time per box: an flock on SPARKOPS_RUNTIME_DIR/launch.lock, held until the
   engine serves (the readiness of `sparkops wait-ready`). A launch that finds it held waits, or
   with --no-wait refuses, naming the engine inside its start and since when (the holder writes
   that into the lock file). A unit engine of the box inside its start (`box_starting`) is waited
   for the same way.
3. A memory preflight, under the lock (so two launches never both fit into the same free memory):
   this engine's planned share plus the shares of the box's running engines, against 1 − the
   audit's headroom (`memory_share_sum`). Over it: refused with the numbers; `--force REASON`
   starts anyway and writes the reason into the change log.
4. The launch is recorded (a `Launch` row: argv, caps, who, when; the engine's row made now), so
   the engine is known before the process scan finds it, and its card says how it came.

Then the launch *execs* the engine: it keeps this process (the pid a shell's `$!` or a unit's
MainPID names, the exit status systemd judges, the signals it is sent, `/proc/PID/environ` with
the caps), and no SparkOps process stays resident beside it. The lock passes to a small watcher
(a forked grandchild holding the same open lock file) that waits for the engine to serve, records
the outcome on the Launch row and exits, which releases the lock; it gives up when the engine's
process is gone or after --budget seconds."""

from __future__ import annotations

import fcntl
import getpass
import json
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from dashboard.collectors import flags as flagmodel
from dashboard.collectors import handrun

from . import readiness

PREFIX = "sparkops launch:"
CAPS = ("MAX_JOBS", "NVCC_THREADS", "TORCHINDUCTOR_COMPILE_THREADS", "FLASHINFER_NVCC_THREADS")
VLLM_DEFAULT_SHARE = 0.9  # vLLM's own default --gpu-memory-utilization
WAIT_POLL_S = 0.2
GIB = 1024**3


class Refused(Exception):
    """The launch does not go ahead; the message says why, with the numbers."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


@dataclass
class Plan:
    argv: list
    kind: str
    url: str
    host: str
    port: int
    flags: dict
    env: dict = field(default_factory=dict)
    caps: dict = field(default_factory=dict)
    share: float | None = None
    share_basis: str = ""


# --- 0. what is being launched --------------------------------------------------------------


def plan_of(argv, env):
    if not argv:
        raise Refused("nothing to launch: sparkops launch [options] -- vllm serve MODEL …", code=2)
    kind = handrun.is_engine_launch(argv)
    if kind is None:
        raise Refused(
            f"not an engine server launch: {' '.join(argv[:4])} (vllm serve …, llama-server …, "
            "python -m sglang.launch_server …)",
            code=2,
        )
    if shutil.which(argv[0], path=env.get("PATH")) is None:
        raise Refused(f"{argv[0]}: not found on PATH", code=2)
    parsed = flagmodel.parse_argv(kind, argv, env=env)
    host = str(parsed.flags.get("--host") or "127.0.0.1")
    try:
        port = int(parsed.flags.get("--port") or handrun.DEFAULT_PORT[kind])
    except ValueError:
        raise Refused(f"--port {parsed.flags.get('--port')!r} is not a port number", code=2) from None
    local = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return Plan(list(argv), kind, f"http://{local}:{port}", local, port, dict(parsed.flags))


# --- 1. the compile caps --------------------------------------------------------------------


def capped_environment(env, caps_in_force):
    """(the engine's environment, {NAME: {value, was}}): each cap set to the box's threshold
    unless the shell already holds a whole number at or below it."""
    out, record = dict(env), {}
    for name in CAPS:
        cap, was = int(caps_in_force[name.lower()]), env.get(name)
        keep = was is not None and was.strip().isdigit() and 0 < int(was) <= cap
        out[name] = was.strip() if keep else str(cap)
        record[name] = {"value": out[name], "was": was, "cap": cap}
    return out, record


def caps_text(record):
    return " ".join(
        f"{n}={c['value']}" + (" (kept)" if c["was"] is not None and c["was"].strip() == c["value"] else "")
        for n, c in record.items()
    )


# --- 2. one cold start at a time ------------------------------------------------------------


class BoxLock:
    """The box's start lock: an flock on RUNTIME_DIR/launch.lock whose content names the holder."""

    def __init__(self, runtime_dir=None):
        self.dir = Path(runtime_dir or settings.SPARKOPS_RUNTIME_DIR)
        self.path = self.dir / "launch.lock"
        self.fd: int | None = None

    def _file(self) -> int:
        if self.fd is None:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)  # not inherited across exec (PEP 446)
        return self.fd

    def try_acquire(self) -> bool:
        try:
            fcntl.flock(self._file(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError as exc:  # no runtime dir, not ours: nothing can start unguarded
            raise Refused(f"the box's start lock {self.path}: {exc} (SPARKOPS_RUNTIME_DIR sets its folder)") from None
        return True

    def holder(self) -> dict:
        try:
            return json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}

    def write_holder(self, info: dict):
        os.ftruncate(self._file(), 0)
        os.pwrite(self._file(), json.dumps(info).encode(), 0)


def holder_text(info):
    since = info.get("since")
    when = time.strftime("%H:%M:%S UTC", time.gmtime(since)) if since else "an unknown time"
    what = info.get("engine") or "an engine"
    pid = f", pid {info['pid']}" if info.get("pid") else ""
    return f"{what} ({info.get('kind', '?')} at {info.get('url', '?')}{pid}) is inside its start since {when}"


def acquire(lock, host, *, no_wait, say, clock=time.monotonic):
    """Hold LOCK and wait out the box's unit engines' starts; the seconds waited. Refused with
    --no-wait when either is busy."""
    began, said = clock(), None
    while not lock.try_acquire():
        why = f"another launch: {holder_text(lock.holder())}"
        if no_wait:
            raise Refused(f"refused (--no-wait): {why}")
        if why != said:
            say(f"{PREFIX} waiting: {why}")
            said = why
        time.sleep(WAIT_POLL_S)
    while (why := unit_start(host)) is not None:
        if no_wait:
            raise Refused(f"refused (--no-wait): {why}")
        if why != said:
            say(f"{PREFIX} waiting: {why}")
            said = why
        time.sleep(1.0)
    return clock() - began


def unit_start(host, *, own_unit=None):
    """Why one of the box's unit engines is activating (what its worker last stored), or None. OWN_UNIT
    (default: the unit this process runs in, when `sparkops launch` is a unit's ExecStart=) is not
    waited for: it is this very start."""
    from dashboard.benchmarks.conditions import STALE_HOST_S
    from dashboard.models import Engine
    from dashboard.services.launchconfig import parse_timestamp

    if host.last_report_at is None or (timezone.now() - host.last_report_at).total_seconds() > STALE_HOST_S:
        return None  # no recent reading of the box's units: nothing to wait for that is known
    own = own_unit if own_unit is not None else (readiness.own_unit() or ("", ""))[0]
    units = (host.latest or {}).get("units") or {}
    for other in Engine.objects.filter(host=host, retired_at__isnull=True).exclude(unit="").order_by("name"):
        props = units.get(other.unit) or {}
        if other.unit == own or props.get("ActiveState") != "activating":
            continue
        since = parse_timestamp(props.get("ExecMainStartTimestamp") or "")
        at = f" since {since:%H:%M:%S} UTC" if since else ""
        return f"{other.name} is inside its start: its unit {other.unit} is activating ({props.get('SubState')}){at}"
    return None


# --- 3. the memory preflight ----------------------------------------------------------------


def planned_share(plan, engine, share_flag):
    """(this engine's share of the box's memory or None, what it rests on)."""
    if plan.kind == "vllm":
        raw = plan.flags.get("--gpu-memory-utilization")
        if raw is None:
            return VLLM_DEFAULT_SHARE, f"vLLM's default --gpu-memory-utilization {VLLM_DEFAULT_SHARE:g}"
        return _fraction(raw, "--gpu-memory-utilization"), f"--gpu-memory-utilization {raw}"
    if plan.kind == "sglang":
        raw = plan.flags.get("--mem-fraction-static")
        if raw is not None:
            return _fraction(raw, "--mem-fraction-static"), f"--mem-fraction-static {raw}"
    if share_flag is not None:
        return share_flag, f"--share {share_flag:g}"
    if plan.kind == "llamacpp" and engine is not None:
        figure = planner_share(engine)
        if figure is not None:
            return figure, f"the planner's figure for {engine.name} (its latest KV-pool ledger row)"
    return None, "not known (no share flag, no planner figure: state one with --share)"


def _fraction(raw, flag):
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise Refused(f"{flag} {raw!r} is not a number", code=2) from None
    if not 0 < value <= 1:
        raise Refused(f"{flag} {raw} is not a share of the memory (0 to 1)", code=2)
    return value


def planner_share(engine):
    from dashboard.planner.model import PlanError
    from dashboard.planner.services import engine_model

    try:
        return engine_model(engine).current_share
    except (PlanError, ValueError, ZeroDivisionError):
        return None


def running_shares(host, *, besides_url):
    """[(name, share or None, basis)] of the box's engines that run now: up, their unit active or
    activating, or launched through here with their process alive."""
    from dashboard.audit.checks import memory_share
    from dashboard.audit.run import snapshots_of
    from dashboard.models import Engine, Launch

    units = (host.latest or {}).get("units") or {}
    live = {}
    for launch in Launch.objects.filter(host=host, outcome__in=["", "ready"]).exclude(pid=None)[:100]:
        if launch.engine_id not in live and _runs_engine(launch.pid):
            live[launch.engine_id] = launch
    engines = [
        e
        for e in Engine.objects.filter(host=host, retired_at__isnull=True).order_by("name")
        if e.url.rstrip("/") != besides_url
        and (
            e.status == "up" or (units.get(e.unit) or {}).get("ActiveState") in ("active", "activating") or e.pk in live
        )
    ]
    snaps = dict((e.pk, d) for e, d in snapshots_of(engines))
    out = []
    for engine in engines:
        share, basis = memory_share(engine, snaps.get(engine.pk)), "its running flags"
        if share is None and engine.kind == "llamacpp":
            share, basis = planner_share(engine), "the planner's figure"
        if share is None and engine.pk in live and live[engine.pk].share is not None:
            share, basis = live[engine.pk].share, f"planned at its launch ({live[engine.pk].share_basis})"
        out.append((engine.name, share, basis if share is not None else "share not known"))
    return out


def _runs_engine(pid):
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    argv = [w.decode("utf-8", "replace") for w in raw.rstrip(b"\0").split(b"\0")]
    return handrun.is_engine_launch(argv) is not None


def box_memory_gib(host):
    from dashboard.planner.services import box_of

    gib = box_of(host)["memory_gib"]
    if gib:
        return gib
    import psutil

    return psutil.virtual_memory().total / GIB


def preflight(plan, host, running, *, headroom, memory_gib):
    """(fits, the numbers in a sentence)."""
    limit = 1 - headroom
    known = [(n, s) for n, s, _ in running if s is not None]
    total = (plan.share or 0.0) + sum(s for _, s in known)
    parts = [f"this engine {plan.share:.2f} ({plan.share_basis})" if plan.share is not None else "this engine ?"]
    parts += [f"{n} {s:.2f} (running, {b})" for n, s, b in running if s is not None]
    unknown = [n for n, s, _ in running if s is None]
    text = (
        " + ".join(parts)
        + f" = {total:.2f} of the box's memory, against {limit:.2f} (1 − the audit's headroom {headroom:g})"
        + f"; of {memory_gib:.1f} GiB: {total * memory_gib:.1f} GiB planned, {limit * memory_gib:.1f} GiB allowed"
    )
    if unknown:
        text += f"; not counted (share not known): {', '.join(unknown)}"
    if plan.share is None:
        text += f"; this engine's share is {plan.share_basis}"
    return total <= limit + 1e-9, text


# --- 4. the record --------------------------------------------------------------------------


def launcher_name():
    return os.environ.get("SUDO_USER") or getpass.getuser()


def engine_for(plan, host, name=None):
    """The engine this launch starts: the box's engine at its address, else NAME or hand-run-PORT
    (made now, or watched again when retired), as the process scan would name it."""
    from dashboard.engine_lifecycle import engine_add
    from dashboard.models import Engine
    from dashboard.services.launchconfig import HAND_RUN_PREFIX

    same = [
        e
        for e in Engine.objects.filter(host=host, retired_at__isnull=True)
        if e.url.rstrip("/") == plan.url and (name is None or e.name == name)
    ]
    if same:
        return same[0]
    name = name or f"{HAND_RUN_PREFIX}{plan.port}"
    existing = Engine.objects.filter(name=name, retired_at__isnull=True).first()
    if existing is not None:
        raise Refused(f"engine {name!r} is watched at {existing.url}, not at {plan.url}", code=2)
    engine, _ = engine_add(name=name, kind=plan.kind, url=plan.url, host=host.name)
    return engine


def record(plan, host, engine, *, waited_s, preflight_text, forced, user):
    from dashboard.models import Launch

    entry = None
    if forced:
        from dashboard.changelog.services import entry_create

        entry = entry_create(
            author_name=user,
            effective_at=timezone.now(),
            title=f"Forced launch of {engine.name} past the memory preflight",
            kind="decision",
            engines=[engine],
            reason=forced,
            body_md=(
                f"`sparkops launch --force` by {user} on {host.name}: the memory preflight refused "
                f"({preflight_text}), and it was started anyway.\n\n"
                f"Command: `{' '.join(plan.argv)}`"
            ),
        )
    return Launch.objects.create(
        host=host,
        engine=engine,
        kind=plan.kind,
        argv=plan.argv,
        caps=plan.caps,
        url=plan.url,
        pid=os.getpid(),  # exec keeps it: the engine's own
        user=user,
        waited_s=round(waited_s, 3),
        share=plan.share,
        share_basis=plan.share_basis[:200],
        preflight=preflight_text,
        forced=forced or "",
        entry=entry,
    )


# --- the whole path -------------------------------------------------------------------------


def launch(argv, *, no_wait=False, force=None, budget_s=1200.0, share=None, name=None, say=print, exec_=True):
    """Everything but the exec when EXEC_ is False (then returns the Launch row and the lock)."""
    from dashboard.audit.thresholds import effective_thresholds
    from dashboard.models import Host

    plan = plan_of(argv, dict(os.environ))
    host, _ = Host.objects.get_or_create(name=settings.SPARKOPS_HOST_NAME)
    in_force = effective_thresholds(host.pk)
    plan.env, plan.caps = capped_environment(dict(os.environ), in_force["compile_caps"])
    lock = BoxLock()
    waited = acquire(lock, host, no_wait=no_wait, say=say)
    lock.write_holder(
        {"engine": name or plan.url, "kind": plan.kind, "url": plan.url, "pid": os.getpid(), "since": time.time()}
    )
    with transaction.atomic():
        engine = engine_for(plan, host, name)
    plan.share, plan.share_basis = planned_share(plan, engine, share)
    running = running_shares(host, besides_url=plan.url)
    fits, numbers = preflight(
        plan, host, running, headroom=in_force["memory_share_sum"]["headroom"], memory_gib=box_memory_gib(host)
    )
    if not fits and not force:
        raise Refused(
            f"refused: the box's memory does not fit it: {numbers}. Lower its share, stop an engine, or "
            "start it anyway with --force REASON (written into the change log)"
        )
    with transaction.atomic():
        row = record(
            plan,
            host,
            engine,
            waited_s=waited,
            preflight_text=numbers,
            forced=force if not fits else "",
            user=launcher_name(),
        )
    lock.write_holder(
        {"engine": engine.name, "kind": plan.kind, "url": plan.url, "pid": os.getpid(), "since": time.time()}
    )
    say(f"{PREFIX} {engine.name}: {plan.kind} at {plan.url}, launch {row.pk} by {row.user}")
    say(f"{PREFIX} compile caps: {caps_text(plan.caps)}")
    say(
        f"{PREFIX} memory: {numbers}"
        + (f" (over it: --force {force!r}, change-log entry {row.entry_id})" if not fits else "")
    )
    if waited >= WAIT_POLL_S:
        say(f"{PREFIX} waited {waited:.1f} s for the box's other starts")
    if not exec_:
        return row, lock
    say(f"{PREFIX} exec {' '.join(plan.argv)} (pid {os.getpid()}); the box's start lock stays held until it serves")
    watcher_spawn(lock, row.pk, plan, budget_s)
    try:
        os.execvpe(plan.argv[0], plan.argv, plan.env)
    except OSError as exc:
        raise Refused(f"exec {plan.argv[0]}: {exc}", code=127) from None
    return row, lock  # pragma: no cover - exec does not return


def watcher_spawn(lock, launch_pk, plan, budget_s):
    """Fork the watcher (a grandchild: nobody must reap it) holding the lock's open file."""
    engine_pid = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    connections.close_all()  # a connection is not shared across fork
    child = os.fork()
    if child:
        os.waitpid(child, 0)
        return
    try:
        if os.fork():
            os._exit(0)
        for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):  # the terminal's keys are the engine's
            signal.signal(sig, signal.SIG_IGN)
        watch(launch_pk, plan, engine_pid, budget_s)
    finally:
        os._exit(0)


def watch(launch_pk, plan, engine_pid, budget_s):
    """In the watcher: wait for the engine to serve, record it, release the lock (by exiting)."""
    from dashboard.models import Launch

    outcome = readiness.wait(plan.url, plan.kind, budget_s, pid=engine_pid, say=lambda line: None)
    fields = {"outcome": outcome.gate, "outcome_line": outcome.line[:300]}
    if outcome.gate == "ready":
        fields["ready_at"] = timezone.now()
    try:
        Launch.objects.filter(pk=launch_pk).update(**fields)
    finally:
        connections.close_all()
    verdict = {
        "ready": f"serves after {outcome.elapsed_s:.1f} s",
        "died": f"its process {engine_pid} is gone after {outcome.elapsed_s:.1f} s",
        "budget": f"does not serve after {outcome.elapsed_s:.1f} s (--budget {budget_s:g})",
    }[outcome.gate]
    print(f"{PREFIX} {plan.url} {verdict}: the box's start lock is released", flush=True)


# --- what the engine card shows -------------------------------------------------------------


def guarded_launches(engines):
    """{engine id: its latest Launch} for those of ENGINES without a unit (hand-run: the only ones
    whose card says how they were started), in one query."""
    from dashboard.models import Launch

    ids = [e.pk for e in engines if not e.unit]
    out: dict = {}
    if ids:
        for row in Launch.objects.filter(engine_id__in=ids).order_by("engine_id", "-started_at", "-pk"):
            out.setdefault(row.engine_id, row)
    return out
