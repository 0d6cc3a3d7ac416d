"""`sparkops launch [options] -- ENGINE ARGV…`: the guarded launch path (the launch script of
docs/field-notes.md §5 that exports the caps and refuses to start beside a running engine, as a program).

1. The compile caps: the audit's thresholds in force for this box (`compile_caps`) go into the
   engine's environment, for vLLM, SGLang and llama-server alike; a lower value already set is kept.
2. One cold start at a time per box: an flock on SPARKOPS_RUNTIME_DIR/launch.lock, held until the
   engine serves from its own socket (the readiness of `sparkops wait-ready`, the port's listening
   socket held by the launched process or its children). A launch that finds it held waits, or
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
process is gone or after --budget seconds.

Steps 0 and 1 (the plan, the caps, Refused) are `controls.launchplan`, step 2 `controls.startlock`,
step 3 `controls.memory_preflight`; this module records the launch, execs and watches, and says
which launches the engine cards show."""

from __future__ import annotations

import getpass
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from sparkops.audit.thresholds import effective_thresholds
from sparkops.collectors import sockowner
from sparkops.gate import readiness

from .launchplan import PREFIX, Refused, capped_environment, caps_text, plan_of
from .memory_preflight import box_memory_gib, planned_share, preflight, running_shares
from .startlock import WAIT_POLL_S, BoxLock, acquire

if TYPE_CHECKING:
    from dashboard.models import Engine, Host, Launch

    from .launchplan import Plan

# --- 4. the record --------------------------------------------------------------------------


def launcher_name() -> str:
    return os.environ.get("SUDO_USER") or getpass.getuser()


def engine_for(plan: Plan, host: Host, name: str | None = None) -> Engine:
    """The engine this launch starts: the box's engine at its address, else NAME or hand-run-PORT
    (made now, or watched again when retired), as the process scan would name it."""
    from dashboard.engine_lifecycle import engine_add
    from dashboard.models import Engine
    from sparkops.launch.handrun import HAND_RUN_PREFIX

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


def record(
    plan: Plan, host: Host, engine: Engine, *, waited_s: float, preflight_text: str, forced: str, user: str
) -> Launch:
    from dashboard.models import Launch

    entry = None
    if forced:
        from sparkops.changelog.models import SPARKOPS_AUTHOR
        from sparkops.changelog.services import entry_create

        entry = entry_create(  # SparkOps's record of the decision, locked when written; the body names who
            author_name=SPARKOPS_AUTHOR,
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


def launch(
    argv: Sequence[str],
    *,
    no_wait: bool = False,
    force: str | None = None,
    budget_s: float = 1200.0,
    share: float | None = None,
    name: str | None = None,
    say: Callable[[str], object] = print,
    exec_: bool = True,
) -> tuple[Launch, BoxLock]:
    """Everything but the exec when EXEC_ is False (then returns the Launch row and the lock)."""
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
        plan, running, headroom=in_force["memory_share_sum"]["headroom"], memory_gib=box_memory_gib(host)
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
            forced=(force or "") if not fits else "",
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
    watcher_spawn(row.pk, plan, budget_s)
    try:
        os.execvpe(plan.argv[0], plan.argv, plan.env)
    except OSError as exc:
        raise Refused(f"exec {plan.argv[0]}: {exc}", code=127) from None
    return row, lock  # pragma: no cover - exec does not return


def watcher_spawn(launch_pk: int, plan: Plan, budget_s: float) -> None:
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


def watch(launch_pk: int, plan: Plan, engine_pid: int, budget_s: float) -> None:
    """In the watcher: wait for the engine to serve, record it, release the lock (by exiting)."""
    from dashboard.models import Launch

    # its own socket: a launch onto a port another process serves is not this engine serving (issue 47)
    owners = sockowner.Owners(port=plan.port, mainpid=engine_pid, whose=f"the launched engine's (pid {engine_pid})")
    outcome = readiness.wait(plan.url, plan.kind, budget_s, pid=engine_pid, owners=owners, say=lambda _line: None)
    fields: dict[str, object] = {"outcome": outcome.gate, "outcome_line": outcome.line[:300]}
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
    }[outcome.gate] + (f"; {outcome.foreign}" if outcome.foreign else "")
    print(f"{PREFIX} {plan.url} {verdict}: the box's start lock is released", flush=True)
