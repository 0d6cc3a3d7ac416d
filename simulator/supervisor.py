"""A small systemd for the simulated engines.

Each engine is a child process (`python -m simulator.engine ...`) run as a
`Type=simple` service with a Restart= policy (default `on-failure`: exit 0 is *not*
restarted, non-zero is, after RestartSec, with StartLimitBurst/IntervalSec). Its unit
properties are rewritten atomically into `<state_dir>/units/<unit>.show` on every change;
its stdout lines and the manager's own messages go to `<state_dir>/journal/<unit>.jsonl`.
A loopback control API drives it (see `ControlAPI`). The units it drives, their spec and
the properties `systemctl show` prints, are `service.Unit`s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import time
import uuid
from pathlib import Path

from sparkops.lifeline import die_with_parent
from sparkops.ports import free_port

from . import systemd as sd
from . import units as unitfiles
from .host import HostState
from .service import Unit, UnitSpec, exec_start_post_property, shall_restart

NPROC = 20  # the simulated box's cores: an uncapped ninja runs nproc + 2 compilers
COMPILER_RSS = int(3.3 * (1 << 30))
IDENT = {"vllm": "vllm", "llamacpp": "llama-server", "sglang": "python3", "openai": "python3"}
REPO_ROOT = Path(__file__).resolve().parents[1]


STARTED_TOO_OFTEN = "start of the service was attempted too often"


class StartLimitHit(Exception):
    """A start refused by the unit's start limit (StartLimitIntervalSec=/StartLimitBurst=)."""


def helper_command(argv: list[str], unit: str = "") -> list[str] | None:
    """The real process behind an ExecStartPost of the simulated box: its readiness helper, or SparkOps's
    own gate (`/…/sparkops wait-ready …`, the audit's readiness fix), run for real. The gate is told its
    UNIT: the simulated engine is in no cgroup of that unit, where systemd would have put it."""
    if argv and argv[0] == unitfiles.HELPER:
        return [sys.executable, "-m", "simulator.waitready", *argv[1:]]
    if len(argv) > 1 and Path(argv[0]).name == "sparkops" and argv[1] == "wait-ready":
        named = ["--unit", unit] if unit and "--unit" not in argv else []
        return [sys.executable, "-m", "sparkops.cli", *argv[1:], *named]
    return None


class Supervisor:
    def __init__(self, specs: list[UnitSpec], state_dir: str | Path) -> None:
        self.state_dir = Path(state_dir)
        self.units_dir = self.state_dir / "units"
        self.units_dir.mkdir(parents=True, exist_ok=True)
        self.root = self.state_dir / "root"  # the simulator's "/": unit files, environment files
        for name, state in unitfiles.OTHER_UNITS.items():
            props = {"Id": name, "Names": name, "LoadState": "loaded", **state}
            sd.write_atomic(self.units_dir / f"{name}.show", "".join(f"{k}={v}\n" for k, v in props.items()))
        self.journal = sd.Journal(self.state_dir)
        self.host = HostState(self.state_dir)
        for spec in specs:
            spec.port = spec.port or free_port()
        self.units = {s.name: Unit(s, self) for s in specs}
        self._watchers: set[asyncio.Task] = set()
        self._host_task: asyncio.Task | None = None

    async def start(self) -> None:
        self.host.tick(0.0)
        self._host_task = asyncio.create_task(self._host_loop())
        for unit in self.units.values():
            unit.write()
            await self.start_unit(unit)

    async def shutdown(self) -> None:
        # watchers keep running: stop_unit needs them to record each child's exit
        if self._host_task:
            self._host_task.cancel()
        await asyncio.gather(*(self.stop_unit(u) for u in self.units.values()))

    async def _host_loop(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            self.host.tick(now - last)
            last = now

    # ---- start / stop ----------------------------------------------------------------------
    async def start_unit(self, unit: Unit, *, manual: bool = True) -> None:
        """Start UNIT as loaded (its files as of the last daemon-reload). With an ExecStartPost
        readiness helper the unit sits in activating/start-post until the helper exits 0; a
        helper that fails, or a start past TimeoutStartSec, fails the start (`_start_post`)."""
        if unit.proc is not None:
            return
        if unit.restart_task and manual:
            unit.restart_task.cancel()
            unit.restart_task = None
        window = time.monotonic() - unit.spec.start_limit_interval
        if sum(1 for t in unit.start_times if t > window) >= unit.spec.start_limit_burst:
            self._start_limit_hit(unit)
            raise StartLimitHit(unit.id)
        if manual:
            unit.p["NRestarts"] = "0"
        unit.stop_requested = False
        unit.fail_result = None
        self.journal.manager(unit.id, f"Starting {unit.description}...", JOB_TYPE="start")
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        }
        unit.proc = await asyncio.create_subprocess_exec(
            *unit.command(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            cwd=REPO_ROOT,
            # a SIGKILLed supervisor leaves no engine behind
            preexec_fn=die_with_parent(),
        )
        unit.start_times.append(time.monotonic())
        pid = unit.proc.pid
        if unit.cold_next and unit.spec.cold_seconds > 0:
            self._spawn_compilers(unit, pid)
        unit.cold_next = False
        # What /proc/PID says of the engine: the argv and environment of the unit as loaded (a
        # real engine's, not the simulator's python), in the unit's cgroup.
        unitfiles.write_proc(
            self.host.dir / "proc", pid, unit.effective, cgroup=None if unit.spec.hand_run else unit.id
        )
        posts = [] if unit.spec.hand_run else unit.effective.get("exec_start_post") or []
        if posts:  # a start forgets the last one's runs (systemd resets each command's exec status)
            unit.p["ExecStartPost"] = exec_start_post_property(posts, {})
        unit.set_state(  # with a start-post, written once its control process runs: systemd forks it in the same turn
            "activating" if posts else "active",
            "start-post" if posts else "running",
            write=not posts,
            MainPID=pid,
            ExecMainPID=pid,
            ExecMainCode=0,
            ExecMainStatus=0,
            ExecMainStartTimestamp=sd.fmt_timestamp(time.time()),
            ExecMainExitTimestamp="",
            Result="success",
            InvocationID=uuid.uuid4().hex,
            ControlGroup=f"/system.slice/{unit.id}",
        )
        if not posts:
            self._started(unit)
        task = asyncio.create_task(self._watch(unit, unit.proc))
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)
        if posts:
            spawned = asyncio.Event()
            unit.post_task = asyncio.create_task(
                self._start_post(unit, unit.proc, posts, unit.start_times[-1], spawned)
            )
            self._watchers.add(unit.post_task)
            unit.post_task.add_done_callback(self._watchers.discard)
            unit.post_task.add_done_callback(lambda _task: spawned.set())
            await spawned.wait()  # a start returns with the unit activating, its control process running

    def _started(self, unit: Unit) -> None:
        self.journal.manager(
            unit.id, f"Started {unit.description}.", MESSAGE_ID=sd.MSG_STARTED, JOB_TYPE="start", JOB_RESULT="done"
        )

    async def _start_post(self, unit: Unit, proc, posts: list[dict], t0: float, spawned: asyncio.Event) -> None:
        """Run the ExecStartPost commands in order, each a real process with $MAINPID, bounded by
        what is left of TimeoutStartSec; active when the last exits 0. SPAWNED is set once the first
        runs and the unit reads activating/start-post with its ControlPID (systemd forks it in the turn
        it enters start-post: no `systemctl show` sees start-post without a ControlPID)."""
        runs: dict[int, dict] = {}  # what show's ExecStartPost= says of each command's run
        for index, post in enumerate(posts):
            cmd = helper_command(post.get("argv") or [], unit.id)
            if cmd is None:
                continue  # a command the simulated box does not have: taken as done
            gate = cmd[1:3] == ["-m", "sparkops.cli"]  # SparkOps's gate: its lines go to the unit's journal
            left = unit.timeout_start - (time.monotonic() - t0)
            ctl = await asyncio.create_subprocess_exec(
                *cmd,
                stdout=asyncio.subprocess.PIPE if gate else asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.STDOUT if gate else asyncio.subprocess.DEVNULL,
                env={
                    **os.environ,
                    "MAINPID": str(proc.pid),
                    "PYTHONPATH": str(REPO_ROOT),
                    "SPARKOPS_SYSTEMCTL": str(Path(__file__).parent / "bin" / "sim-systemctl"),
                    "SPARKOPS_SIM_STATE_DIR": str(self.state_dir),
                },
                cwd=REPO_ROOT,
                preexec_fn=die_with_parent(),
            )
            if gate:
                self._journal_lines(unit, ctl, "sparkops")
            unit.control_proc = ctl
            unit.p["ControlPID"] = str(ctl.pid)
            runs[index] = {"pid": ctl.pid, "start": time.time(), "stop": None, "rc": None}
            unit.p["ExecStartPost"] = exec_start_post_property(posts, runs)
            unit.write()
            spawned.set()
            try:
                rc = await asyncio.wait_for(ctl.wait(), None if left == float("inf") else max(left, 0.01))
            except TimeoutError:
                rc = None
            finally:
                if ctl.returncode is None:
                    ctl.kill()
                    await ctl.wait()
                runs[index].update(stop=time.time(), rc=ctl.returncode)
                if unit.control_proc is ctl:
                    unit.control_proc = None
                # A restart kills this helper and starts the next one without waiting for this exit to be
                # reaped: once a later start has begun, the unit's ControlPID and ExecStartPost= are its
                # (a loaded box reaped the old helper after the new one ran, and show read ControlPID=0
                # in start-post, which systemd never shows).
                if unit.proc is proc or unit.proc is None:
                    unit.p["ControlPID"] = "0"
                    unit.p["ExecStartPost"] = exec_start_post_property(posts, runs)
                    unit.write()
            if unit.proc is not proc or unit.stop_requested:
                return  # the main process died meanwhile (its exit is recorded) or a stop came
            if rc is None:
                self.journal.manager(unit.id, f"{unit.id}: start-post operation timed out. Terminating.", priority=4)
                return await self._fail_start(unit, proc, "timeout")
            if rc != 0:
                self.journal.manager(
                    unit.id,
                    f"{unit.id}: Control process exited, code=exited, status={rc}/{sd.EXIT_STATUS_NAMES.get(rc, rc)}",
                    priority=5,
                )
                return await self._fail_start(unit, proc, "exit-code")
        unit.set_state("active", "running")
        self._started(unit)

    def _journal_lines(self, unit: Unit, proc, ident: str) -> None:
        """PROC's output lines into UNIT's journal, as journald takes a unit's stdout."""

        async def copy() -> None:
            async for raw in proc.stdout:
                self.journal.process_line(unit.id, proc.pid, ident, raw.decode(errors="replace").rstrip("\n"))

        task = asyncio.create_task(copy())
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    async def _fail_start(self, unit: Unit, proc, result: str) -> None:
        """The manager gives up on a start: SIGTERM to the main process (SIGKILL after 5 s); its
        exit is recorded with RESULT (`on_exit`), and the Restart= policy decides what follows."""
        unit.fail_result = result
        unit.set_state("deactivating", "stop-sigterm")
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 5.0)
        except TimeoutError:
            proc.kill()

    def _spawn_compilers(self, unit: Unit, pid: int) -> None:
        """A cold start's JIT compile: MAX_JOBS compilers (nproc + 2 when the unit does not cap
        it) in the simulated /proc, children of the engine, in its cgroup, for cold_seconds."""
        env = unit.effective.get("environment") or {}
        try:
            jobs = max(1, int(env["MAX_JOBS"]))
        except (KeyError, ValueError):
            jobs = NPROC + 2
        base = 4_000_000 + 1000 * list(self.units).index(unit.spec.name)
        paths = []
        for i in range(jobs):
            d = self.host.dir / "proc" / str(base + i)
            d.mkdir(parents=True, exist_ok=True)
            pages = COMPILER_RSS // 4096
            (d / "cgroup").write_text(f"0::/system.slice/{unit.id}\n")
            sd.write_atomic(
                d / "stat",
                f"{base + i} (cicc) R {pid} {base} {base} 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 1 "
                f"{COMPILER_RSS} {pages} 18446744073709551615\n",
            )
            paths.append(d)
        unit.compilers = paths
        self.journal.process_line(
            unit.id,
            pid,
            IDENT.get(unit.spec.kind, "python3"),
            f"INFO: JIT cache is cold: compiling kernels with {jobs} jobs",
        )

        async def finish() -> None:
            await asyncio.sleep(unit.spec.cold_seconds)
            self._reap_compilers(unit)

        task = asyncio.create_task(finish())
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    def _reap_compilers(self, unit: Unit) -> None:

        for d in unit.compilers:
            shutil.rmtree(d, ignore_errors=True)
        unit.compilers = []

    async def _watch(self, unit: Unit, proc) -> None:
        ident = IDENT.get(unit.spec.kind, "python3")
        async for raw in proc.stdout:
            self.journal.process_line(unit.id, proc.pid, ident, raw.decode(errors="replace").rstrip("\n"))
        rc = await proc.wait()
        unit.proc = None
        self._reap_compilers(unit)

        shutil.rmtree(self.host.dir / "proc" / str(proc.pid), ignore_errors=True)
        self.on_exit(unit, rc)

    def on_exit(self, unit: Unit, rc: int) -> None:
        code, status = ("exited", rc) if rc >= 0 else ("killed", -rc)
        name = sd.EXIT_STATUS_NAMES.get(status, str(status)) if code == "exited" else sd.signal_name(status)
        clean = (code == "exited" and status == 0) or (code == "killed" and status in sd.CLEAN_SIGNALS)
        result = "success" if clean or unit.stop_requested else ("exit-code" if code == "exited" else "signal")
        if unit.fail_result and not unit.stop_requested:
            result, unit.fail_result = unit.fail_result, None
        if unit.control_proc is not None and unit.control_proc.returncode is None:
            unit.control_proc.kill()  # the helper of a start whose main process died
        if not clean:  # a clean exit is logged at debug level, which the manager (LogLevel=info) drops
            self.journal.manager(
                unit.id,
                f"{unit.id}: Main process exited, code={code}, status={status}/{name}",
                priority=5,
                MESSAGE_ID=sd.MSG_PROCESS_EXIT,
                EXIT_CODE=code,
                EXIT_STATUS=status,
            )
        exit_props = dict(
            MainPID=0,
            ExecMainCode=1 if code == "exited" else 2,
            ExecMainStatus=status,
            ExecMainExitTimestamp=sd.fmt_timestamp(time.time()),
            Result=result,
        )
        # systemd 252 goes dead (or failed), then auto-restart or is collected, in one turn of its event
        # loop (its GC queue runs before the next D-Bus request): `systemctl show` sees only the end.
        if result == "success":
            unit.set_state("inactive", "dead", write=False, **exit_props)
            self.journal.manager(unit.id, f"{unit.id}: Deactivated successfully.", MESSAGE_ID=sd.MSG_SUCCESS)
        else:
            unit.set_state("failed", "failed", write=False, **exit_props)
            self.journal.manager(
                unit.id,
                f"{unit.id}: Failed with result '{result}'.",
                priority=4,
                MESSAGE_ID=sd.MSG_FAILURE,
                UNIT_RESULT=result,
            )
        if unit.stop_requested:
            # A restart job logs its stop half's end as JOB_TYPE=restart (systemd 252), a stop as stop.
            self.journal.manager(
                unit.id,
                f"Stopped {unit.description}.",
                MESSAGE_ID=sd.MSG_STOPPED,
                JOB_TYPE=unit.stop_job,
                JOB_RESULT="done",
            )
        elif shall_restart(unit.spec.restart, result, code, status):
            unit.set_state("activating", "auto-restart")
            unit.restart_task = asyncio.create_task(self._auto_restart(unit))
            return
        if result == "success":
            unit.collect()
        else:
            unit.write()

    async def _auto_restart(self, unit: Unit) -> None:
        await asyncio.sleep(unit.spec.restart_sec)
        n = int(unit.p["NRestarts"]) + 1
        unit.p["NRestarts"] = str(n)
        self.journal.manager(
            unit.id,
            f"{unit.id}: Scheduled restart job, restart counter is at {n}.",
            MESSAGE_ID=sd.MSG_RESTART,
            N_RESTARTS=n,
        )
        self.journal.manager(
            unit.id, f"Stopped {unit.description}.", MESSAGE_ID=sd.MSG_STOPPED, JOB_TYPE="restart", JOB_RESULT="done"
        )
        unit.restart_task = None
        with contextlib.suppress(StartLimitHit):
            await self.start_unit(unit, manual=False)

    def _start_limit_hit(self, unit: Unit) -> None:
        """As systemd 252's service_start → unit_test_start_limit → service_enter_dead: the unit
        fails, and its Result becomes start-limit-hit only when the run before ended well (a
        crash loop keeps Result=exit-code; the journal says "Start request repeated too quickly")."""
        result = "start-limit-hit" if unit.p["Result"] == "success" else unit.p["Result"]
        unit.set_state("failed", "failed", Result=result)
        self.journal.manager(unit.id, f"{unit.id}: Start request repeated too quickly.", priority=4)
        self.journal.manager(
            unit.id,
            f"{unit.id}: Failed with result '{result}'.",
            priority=4,
            MESSAGE_ID=sd.MSG_FAILURE,
            UNIT_RESULT=result,
        )
        self.journal.manager(
            unit.id, f"Failed to start {unit.description}.", priority=3, MESSAGE_ID=sd.MSG_START_FAILED
        )

    def reset_failed(self, unit: Unit) -> None:
        """`systemctl reset-failed`: the start limit's count is forgotten, and a failed unit (no
        longer kept for its failure) is collected."""
        unit.start_times = []
        if unit.proc is None and unit.restart_task is None and unit.p["ActiveState"] in ("failed", "inactive"):
            unit.collect()

    async def stop_unit(self, unit: Unit, job: str = "stop") -> None:
        unit.stop_job = job
        if unit.control_proc is not None and unit.control_proc.returncode is None:
            unit.control_proc.kill()  # a stop during start-post ends the helper too
        if unit.restart_task:
            unit.restart_task.cancel()
            unit.restart_task = None
            if unit.proc is None:
                unit.set_state("inactive", "dead")
                unit.collect()
        proc = unit.proc
        if proc is None:
            return
        unit.stop_requested = True
        self.journal.manager(unit.id, f"Stopping {unit.description}...", MESSAGE_ID=sd.MSG_STOPPING, JOB_TYPE="stop")
        unit.set_state("deactivating", "stop-sigterm")
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 5.0)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        while unit.proc is proc:  # let _watch record the exit
            await asyncio.sleep(0.01)

    async def restart_unit(self, unit: Unit) -> None:
        await self.stop_unit(unit, job="restart")
        await self.start_unit(unit)

    def signal_unit(self, unit: Unit, sig: int) -> bool:
        if unit.proc is None:
            return False
        unit.proc.send_signal(sig)
        return True
