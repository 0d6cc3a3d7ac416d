"""Seeing a death at once: the kernel and the journal tell the box's worker, it does not ask.

- `ExitWatcher`: a pidfd (`os.pidfd_open`) for each watched engine's main process (its unit's
  MainPID) and its engine-core children (/proc/PID/task/PID/children whose command line names
  an EngineCore: a real vLLM's EngineCore dies seconds before its API server exits 0), all in
  one `selectors` loop on a thread of its own. A pidfd turns readable when its process exits;
  the watcher then calls `on_exit(engine_pk, pid, what)` once. The resident poller re-arms it
  after every metrics tick with the MainPIDs that tick read (`watch()`): a unit with a new main
  process gets a new pidfd, a pid that is gone is forgotten.
- `JournalFollower`: one `journalctl -f -o json` for the box's watched units (system and
  --user, ORed in one process), lines bounded (`LINE_MAX` bytes, longer ones skipped), restarted
  when it dies or the unit set changes. It keeps, per unit, the last fatal line (the collector's
  own signatures, `collectors/systemd.FATAL`; a CUDA/kernel line beats the generic "EngineCore
  died") and the last "start request repeated too quickly" line since the unit last started, so
  the cause is in memory when the death is seen, not read after it; and the manager's last job and
  run-end messages (Stopping, Stopped, Started, Scheduled restart, Deactivated successfully,
  Failed with result), which tell a stop someone asked for from an exit of the engine's own
  (`job_entries`, `wait_for_end`): the exit path waits on them rather than run journalctl.

Neither raises an alert: the poller's `exit_seen` turns an exit into the same liveness finding a
failed probe makes (`liveness.liveness_record`, the unit read, `evaluate_liveness`), under the lock
the probe takes too, so a death is one alert whichever saw it first. The probe stays the backstop
(remote engines, a lost event, a hang)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import selectors
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable

from django.conf import settings

log = logging.getLogger(__name__)
ENGINE_CORE = re.compile(r"EngineCore|engine_core", re.I)  # vLLM titles it VLLM::EngineCore
CHILDREN_EVERY_S = 5.0  # a main process's engine-core children are looked for this often
LINE_MAX = 64 * 1024  # a journal line longer than this is skipped, never buffered whole
RESTART_AFTER_S = 1.0  # a journalctl that died is started again after this, doubling while it dies young
RESTART_MAX_S = 60.0
YOUNG_S = 10.0  # a journalctl that ended sooner than this after its start "died young"
GIVE_UP_AFTER = 4  # young deaths in a row: it cannot follow here; wait for the unit set to change
JOB_KEPT = 16  # the manager's job and run-end messages kept per unit
# systemd's "Deactivated successfully." and "Failed with result": a run's end, logged once it is over
SUCCESS_MESSAGE_ID = "7ad2d189f7e94e70a38c781354912448"
FAILURE_MESSAGE_ID = "d9b373ed55a64feb8242e02dbe79a49c"


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _full(unit):
    """A unit's name as the journal gives it: "vllm" is "vllm.service", as systemctl takes it."""
    return unit if "." in unit else f"{unit}.service"


def pidfd_supported():
    """Whether this kernel and Python give pidfds (Linux 5.3+, Python 3.9+)."""
    if not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False
    return True


def engine_core_children(pid, proc="/proc"):
    """[(pid, title)] of PID's direct children whose command line names an engine core."""
    try:
        with open(f"{proc}/{pid}/task/{pid}/children") as fh:
            kids = [int(k) for k in fh.read().split()]
    except (OSError, ValueError):
        return []
    found = []
    for kid in kids:
        try:
            with open(f"{proc}/{kid}/cmdline", "rb") as fh:
                title = fh.read(4096).replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        if ENGINE_CORE.search(title):
            found.append((kid, title.split(" ")[0][:80]))
    return found


class ExitWatcher:
    """pidfds of the watched processes in one selector; `on_exit(engine_pk, pid, what)` once each."""

    def __init__(self, on_exit: Callable[[int, int, str], None], *, name="sparkops-exits"):
        self.on_exit = on_exit
        self.selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._wanted: dict[int, tuple[int, ...]] | None = None  # engine pk -> main pids; set by watch()
        self._asked: dict[int, tuple[int, ...]] | None = None  # what watch() was last asked
        self.watched: dict[int, tuple[int, int, str, int]] = {}  # pid -> (fd, engine pk, what, main pid)
        self._children_at: dict[int, float] = {}  # main pid -> when its children were last looked for
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.exits = 0
        self._gone: deque[int] = deque(maxlen=256)  # pids seen exiting: a stale MainPID (a zombie) is not re-armed

    def start(self):
        self.thread.start()
        return self

    def stop(self, timeout=5.0):
        self._stop.set()
        self._poke()
        self.thread.join(timeout)
        for fd, *_ in self.watched.values():
            os.close(fd)
        self.watched.clear()
        self.selector.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def watch(self, mains: dict[int, int]):
        """Watch these main processes ({engine pk: pid}; 0 or None: none) and their engine-core
        children from now on; the others are let go. Applied on the watcher's own thread."""
        wanted: dict[int, tuple[int, ...]] = {pk: (pid,) for pk, pid in mains.items() if pid}
        with self._lock:
            # Every metrics tick asks again: the same mains, each already armed, need no wake-up
            # of the watcher's thread (a pipe write, a select and an _apply every 2 s for nothing).
            if wanted == self._asked and all(pids[0] in self.watched for pids in wanted.values()):
                return
            self._wanted = self._asked = wanted
        self._poke()

    def pids_of(self, engine_pk):
        return sorted(pid for pid, (_, pk, _, _) in self.watched.items() if pk == engine_pk)

    def _poke(self):
        with contextlib.suppress(OSError):  # the pipe is full: a wake-up is already pending
            os.write(self._wake_w, b".")

    def _run(self):
        while not self._stop.is_set():
            try:
                events = self.selector.select(timeout=CHILDREN_EVERY_S)
            except (OSError, ValueError):  # closed under us at stop()
                return
            for key, _ in events:
                if key.data is None:
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                    continue
                self._exited(key.data)
            try:
                self._apply()
            except Exception:
                log.exception("exit watcher: re-arming failed; the probes still watch")

    def _exited(self, pid):
        fd, pk, what, _ = self.watched.pop(pid)
        self._gone.append(pid)
        self.selector.unregister(fd)
        os.close(fd)
        self.exits += 1
        try:
            self.on_exit(pk, pid, what)
        except Exception:
            log.exception("exit watcher: handling the exit of pid %s failed; the probe will see it", pid)

    def _arm(self, pid, pk, what, main):
        if pid in self._gone:
            return
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:  # gone before we looked: the probe and the next tick see it
            return
        except OSError as exc:
            log.debug("pidfd_open(%s) failed: %s", pid, exc)
            return
        self.watched[pid] = (fd, pk, what, main)
        self.selector.register(fd, selectors.EVENT_READ, pid)

    def _apply(self):
        with self._lock:
            wanted, self._wanted = self._wanted, None
        now = time.monotonic()
        if wanted is not None:
            mains = {pids[0]: pk for pk, pids in wanted.items()}
            for pid, (fd, pk, _what, main) in list(self.watched.items()):
                if mains.get(main) != pk:  # a main pid no longer wanted, or its children
                    self.selector.unregister(fd)
                    os.close(fd)
                    del self.watched[pid]
            for main, pk in mains.items():
                if main not in self.watched:
                    self._arm(main, pk, "main process", main)
                    self._children_at.pop(main, None)
            self._children_at = {m: t for m, t in self._children_at.items() if m in mains}
        for main, (_, pk, what, _) in list(self.watched.items()):
            if what != "main process" or now - self._children_at.get(main, float("-inf")) < CHILDREN_EVERY_S:
                continue
            self._children_at[main] = now
            for kid, title in engine_core_children(main):
                if kid not in self.watched:
                    self._arm(kid, pk, f"engine core {title}", main)


class JournalFollower:
    """`journalctl -f -o json` over the watched units; the last fatal and start-limit line per unit."""

    def __init__(self, *, name="sparkops-journal"):
        self.units: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # (system units, user units)
        self.fatal: dict[str, tuple[float, str, bool]] = {}  # unit -> (when, line, specific)
        self.start_limit: dict[str, tuple[float, str]] = {}
        self.started: dict[str, float] = {}  # unit -> when systemd last said "Started"
        self.jobs: dict[str, deque] = {}  # unit -> the manager's last job and run-end entries, oldest first
        self.spoke: dict[str, float] = {}  # unit -> when its own process last wrote a line (the journal's stamp)
        self.lines = self.restarts = 0
        self._young = 0  # journalctl runs in a row that died young (one that cannot follow: back off)
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._stop = threading.Event()
        self._news = threading.Condition()  # notified on each job or run-end entry kept
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self, timeout=5.0):
        self._stop.set()
        self._changed.set()
        self._kill()
        self.thread.join(timeout)

    def follow(self, units, user_units):
        wanted = (tuple(sorted(set(units))), tuple(sorted(set(user_units))))
        with self._lock:
            if wanted == self.units:
                return
            self.units = wanted
        self._changed.set()
        self._kill()  # the reader sees EOF and starts one over the new set

    def cause(self, unit, since=0.0, *, run_start=None):
        """(fatal line, start-limit line) of UNIT logged since it last started and not before SINCE
        (wall seconds, the journal's own timestamps). RUN_START: when the process that died started:
        its lines count even when a new run has started since (a restart), and no earlier run's do."""
        unit = _full(unit)
        since = max(since, self.started.get(unit, 0.0) if run_start is None else run_start)
        fatal = self.fatal.get(unit)
        limit = self.start_limit.get(unit)
        return (
            fatal[1] if fatal and fatal[0] >= since else "",
            limit[1] if limit and limit[0] >= since else "",
        )

    def following(self, unit) -> bool:
        """Whether a journalctl follows UNIT now (its entries reach `jobs` as they are written)."""
        proc = self._proc
        name = _full(unit)
        return proc is not None and proc.poll() is None and any(_full(u) == name for units in self.units for u in units)

    def job_entries(self, unit) -> list[dict]:
        """The manager's last job and run-end entries for UNIT, oldest first."""
        with self._news:
            return list(self.jobs.get(_full(unit), ()))

    def wait_for_end(self, unit, since, deadline, *, spoke_after=None) -> list[dict] | None:
        """UNIT's job and run-end entries once the journal has told how its run ended: a job or
        run-end message of the manager logged at or after SINCE (wall seconds: "Stopping",
        "Stopped", "Scheduled restart", "Deactivated successfully", "Failed with result"), or a
        line of the unit's own process stamped at or after SPOKE_AFTER (its last words before the
        exit: a stop job's "Stopping" is logged before the SIGTERM that makes them, so it would be
        here by then; a user manager logs a clean exit at debug level, i.e. not at all). Waits
        until DEADLINE (monotonic); None when nothing told by then or nothing follows the unit."""
        from sparkops.collectors.unitnow import RESTART_MESSAGE_ID, STOPPED_MESSAGE_ID, STOPPING_MESSAGE_ID

        unit = _full(unit)
        ends = {SUCCESS_MESSAGE_ID, FAILURE_MESSAGE_ID, STOPPING_MESSAGE_ID, STOPPED_MESSAGE_ID, RESTART_MESSAGE_ID}
        with self._news:
            while True:
                kept = list(self.jobs.get(unit, ()))
                told = any(
                    e.get("MESSAGE_ID") in ends and _int(e.get("__REALTIME_TIMESTAMP")) >= since * 1e6 for e in kept
                )
                if told or (spoke_after is not None and self.spoke.get(unit, 0.0) >= spoke_after):
                    return kept
                left = deadline - time.monotonic()
                if left <= 0 or not self.following(unit):
                    return None
                self._news.wait(min(left, 0.05))  # woken by news; a lapse re-checks that it still follows

    def _kill(self):
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def _run(self):
        while not self._stop.is_set():
            units, user_units = self.units
            self._changed.clear()
            if not units and not user_units:
                self._changed.wait(CHILDREN_EVERY_S)
                continue
            argv = [
                settings.SPARKOPS_JOURNALCTL,
                "-f",
                "-o",
                "json",
                "-n",
                "0",
                "--no-pager",
                *(f"--unit={u}" for u in units),
                *(f"--user-unit={u}" for u in user_units),
            ]
            try:
                self._proc = subprocess.Popen(
                    argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
                )
            except OSError as exc:
                log.warning("journal follower: %s did not start (%s); the probes read the journal", argv[0], exc)
                self._changed.wait(RESTART_AFTER_S * 10)
                continue
            began = time.monotonic()
            try:
                self._read(self._proc)
            finally:
                self._kill()
                self._proc.wait()
                if self._proc.stdout is not None:  # always: it is a pipe
                    self._proc.stdout.close()
            if not self._stop.is_set() and not self._changed.is_set():
                self.restarts += 1
                self._young = self._young + 1 if time.monotonic() - began < YOUNG_S else 0
                if self._young >= GIVE_UP_AFTER:
                    log.warning(
                        "journal follower: %s cannot follow (ended %d times at once, status %s); not started "
                        "again until the watched units change; the exit path reads the journal itself",
                        argv[0],
                        self._young,
                        self._proc.returncode,
                    )
                    self._changed.wait()
                    self._young = 0
                    continue
                delay = min(RESTART_MAX_S, RESTART_AFTER_S * 2 ** max(0, self._young - 1))
                log.info(
                    "journal follower: %s ended (status %s); started again in %.0f s",
                    argv[0],
                    self._proc.returncode,
                    delay,
                )
                self._changed.wait(delay)

    def _read(self, proc):
        from sparkops.collectors.systemd import classify, message
        from sparkops.collectors.unitnow import GENERIC, JOB_MESSAGES, START_LIMIT_TEXT, STARTED_MESSAGE_ID

        kept_ids = JOB_MESSAGES | {SUCCESS_MESSAGE_ID, FAILURE_MESSAGE_ID}

        stream = proc.stdout
        while not self._stop.is_set():
            line = stream.readline(LINE_MAX)
            if not line:
                return
            if not line.endswith(b"\n"):  # longer than LINE_MAX: skip the rest of it
                while line and not line.endswith(b"\n"):
                    line = stream.readline(LINE_MAX)
                continue
            self.lines += 1
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if not isinstance(entry, dict):
                continue
            # The manager's messages name the unit in USER_UNIT= / UNIT= (their _SYSTEMD_* fields are
            # the manager's own: init.scope, user@UID.service); a unit's own lines in _SYSTEMD_*.
            unit = entry.get("USER_UNIT") or entry.get("UNIT")
            own = not unit  # a line of the unit's own process, not the manager's about it
            unit = unit or entry.get("_SYSTEMD_USER_UNIT") or entry.get("_SYSTEMD_UNIT")
            if not unit:
                continue
            # When journald received it (its own clock, as the unit's timestamps are), else now.
            now = (_int(entry.get("__REALTIME_TIMESTAMP")) / 1e6) or time.time()
            if own:
                with self._news:
                    self.spoke[unit] = now
                    self._news.notify_all()
            if entry.get("MESSAGE_ID") in kept_ids:
                small = {k: entry.get(k) for k in ("MESSAGE_ID", "JOB_TYPE", "__REALTIME_TIMESTAMP") if k in entry}
                small.setdefault("__REALTIME_TIMESTAMP", str(int(now * 1e6)))
                with self._news:
                    self.jobs.setdefault(unit, deque(maxlen=JOB_KEPT)).append(small)
                    self._news.notify_all()
            if entry.get("MESSAGE_ID") == STARTED_MESSAGE_ID:
                self.started[unit] = now
                continue
            text = message(entry)
            if START_LIMIT_TEXT in text:
                self.start_limit[unit] = (now, text[:500])
            sig = classify(entry)[0]
            if sig:
                specific = sig not in GENERIC
                kept = self.fatal.get(unit)
                # a CUDA/kernel line already kept for this run beats a later generic "EngineCore died"
                if specific or not kept or not kept[2] or kept[0] < self.started.get(unit, 0.0):
                    self.fatal[unit] = (now, text[:500], specific)
