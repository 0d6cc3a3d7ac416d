"""When does an engine serve? The readiness gate shared by `sparkops wait-ready` (a unit's
ExecStartPost=) and `sparkops launch` (its lock is held until the engine serves).

The first helper of docs/field-notes.md §7 counted its sleeps, so a socket that accepted and stalled held it
for twice its nominal budget, and it exited 0 on its timeout, so systemd called an engine that
never served "active". This one:

- keeps a monotonic deadline: every request's timeout is capped by the time left, and the main
  thread gives up at the deadline whatever a request is doing (the probe runs in a thread);
- watches the engine's main process (a pidfd where the kernel has them, else kill(pid, 0) and
  /proc/PID/stat) every PID_POLL_S, and gives up at once when it is gone;
- asks each kind its own readiness: llama.cpp's and SGLang's `/health` answer 503 while loading,
  vLLM listens only once built; all of them must then list a model on `/v1/models`;
- then asks the kernel whose the answer was (`sockowner.Owners`): a port served by another process
  (a hand-run engine on the unit's port, issue 47) is not the unit's engine serving, so the gate
  keeps waiting, and says who holds the port in its progress and in its verdict.

Importable without Django settings (the gate runs under a unit that has none)."""

from __future__ import annotations

import os
import re
import select
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dashboard.systemctl_show import unit_props

if TYPE_CHECKING:
    from dashboard import http
    from sparkops.collectors.sockowner import Owners

PREFIX = "sparkops wait-ready:"
PID_POLL_S = 0.25  # the main process is looked at this often: gone → exit within ~0.3 s
PROBE_EVERY_S = 0.2  # the engine is asked at most this often
REQUEST_CAP_S = 5.0  # one request's timeout, further capped by the budget left
PROGRESS_EVERY_S = 10.0  # a "still waiting" line this often (the journal shows the gate alive)
HEALTH_KINDS = ("vllm", "sglang", "llamacpp")
KINDS = ("vllm", "sglang", "llamacpp", "openai")

# The lines the gate ends with; `outcome_of` reads them back from the journal (launch/gate_journal.py).
READY = "ready after {elapsed:.1f} s (budget {budget:g} s{pid})"
DIED = "failed: main process {mainpid} is gone after {elapsed:.1f} s (budget {budget:g} s)"
BUDGET = "failed: not serving after {elapsed:.1f} s, its budget of {budget:g} s{pid} (last: {note})"
REFUSED = "refused: {why}"
OUTCOME = re.compile(
    rf"^{re.escape(PREFIX)} (?:"
    r"(?P<ready>ready) after (?P<r_s>[\d.]+) s"
    r"|failed: main process (?P<dead_pid>\d+) is (?P<died>gone) after (?P<d_s>[\d.]+) s"
    r"|failed: (?P<budget>not serving) after (?P<b_s>[\d.]+) s"
    r"|(?P<refused>refused): "
    r")"
)
MAINPID = re.compile(r"main (?:process|pid) (\d+)")


@dataclass
class Outcome:
    code: int  # the exit status: 0 ready, 1 failed
    gate: str  # ready | died | budget
    elapsed_s: float
    line: str  # the last line printed, PREFIX included
    foreign: str = ""  # who held the port instead of the engine's own processes, when another did


def outcome_of(message: str) -> dict | None:
    """A gate's final journal line → {gate, elapsed_s, mainpid}; None for any other line."""
    m = OUTCOME.match(message or "")
    if m is None:
        return None
    gate = next(g for g in ("ready", "died", "budget", "refused") if m.group(g))
    seconds = m.group({"ready": "r_s", "died": "d_s", "budget": "b_s"}.get(gate, "r_s"))
    pid = MAINPID.search(message)
    return {
        "gate": gate,
        "elapsed_s": float(seconds) if seconds else None,
        "mainpid": int(pid.group(1)) if pid else None,
        "line": message[:300],
    }


# --- the engine -----------------------------------------------------------------------------


def probe(url: str, kind: str | None, timeout: float) -> tuple[bool, str]:
    """(serves, what it said) within TIMEOUT seconds in all."""
    from dashboard import http

    deadline = time.monotonic() + timeout
    base = url.rstrip("/")

    def get(path: str) -> http.Response:
        left = deadline - time.monotonic()
        if left <= 0.01:
            raise http.Timeout("timed out (budget)", url=base + path)
        return http.get(base + path, timeout=left, max_bytes=1 << 20)

    try:
        if kind in HEALTH_KINDS:
            get("/health")
        models = get("/v1/models").json()
    except http.HttpStatus as exc:
        loading = " (loading)" if exc.status == 503 else ""
        return False, f"{exc.url.removeprefix(base)} answers {exc.status}{loading}"
    except http.HttpError as exc:
        return False, f"{exc.url.removeprefix(base) if exc.url else ''} {exc}".strip()
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list) or not data:
        return False, "/v1/models lists no model yet"
    first = data[0].get("id") if isinstance(data[0], dict) else None
    return True, f"/v1/models lists {first or 'a model'}"


class MainProcess:
    """The engine's main process: `gone()` without blocking. A pidfd where the kernel has them (no
    confusion with a reused pid; readable once the process has exited, a zombie included)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.dead = pid, False
        self.fd: int | None = None
        try:
            self.fd = os.pidfd_open(pid)
        except ProcessLookupError:
            self.dead = True
        except (AttributeError, OSError):
            self.fd = None  # no pidfd here (old kernel, seccomp): kill(pid, 0) below

    def gone(self) -> bool:
        if self.dead:
            return True
        if self.fd is not None:
            readable, _, _ = select.select([self.fd], [], [], 0)
            self.dead = bool(readable)
        else:
            self.dead = not _alive(self.pid)
        return self.dead

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:  # a zombie answers kill(0) but no longer runs
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rfind(")") + 2 :][:1] != "Z"
    except OSError:
        return False


class _Asking(threading.Thread):
    def __init__(self, url: str, kind: str | None, timeout: float) -> None:
        super().__init__(daemon=True)  # a stalled request never holds the exit
        self.args_ = (url, kind, timeout)
        self.result: tuple[bool, str] | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self.result = probe(*self.args_)
        except Exception as exc:  # the gate reports it and asks again; it never dies of one answer
            self.result = (False, f"{type(exc).__name__}: {exc}"[:200])
        self.done.set()


def wait(
    url: str,
    kind: str | None,
    budget_s: float,
    *,
    pid: int | None = None,
    owners: Owners | None = None,
    say: Callable[[str], object] = print,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:
    """Wait until URL serves (KIND's readiness) from a socket OWNERS says is its own (a
    sockowner.Owners; None: any), the main process PID is gone, or BUDGET_S seconds of wall clock
    have passed, whatever any request is doing. SAY gets each progress line."""
    from dashboard import http  # noqa: F401  imported now: in the probe's thread it would hold the GIL on the clock

    start = clock()
    deadline = start + budget_s
    proc = MainProcess(pid) if pid else None
    asking: _Asking | None = None
    asked_at = start
    note, next_probe, next_progress = "no answer yet", start, start + PROGRESS_EVERY_S

    foreign = ""  # who held the port when the engine answered from a socket not its own

    def end(code: int, gate: str, text: str) -> Outcome:
        # who held the port, even when the last answer was another (a probe timed out at the deadline)
        line = f"{PREFIX} {text}{f'; {foreign}' if foreign and gate != 'ready' and foreign not in text else ''}"
        say(line)
        if proc is not None:
            proc.close()
        return Outcome(code, gate, clock() - start, line, foreign if gate != "ready" else "")

    pid_text = f", main pid {pid}" if pid else ""
    while True:
        now = clock()
        if proc is not None and proc.gone():
            return end(1, "died", DIED.format(mainpid=pid, elapsed=now - start, budget=budget_s))
        if now >= deadline:
            if asking is not None and asking.done.is_set():  # it ended as the deadline came: its word
                note = (asking.result or (False, "no answer"))[1]
            elif asking is not None:  # a socket that accepted and stalls
                note = f"{note}; a request unanswered for {now - asked_at:.1f} s"
            return end(1, "budget", BUDGET.format(elapsed=now - start, budget=budget_s, pid=pid_text, note=note))
        if asking is None and now >= next_probe:
            asking, asked_at = _Asking(url, kind, min(REQUEST_CAP_S, deadline - now)), now
            asking.start()
        if asking is not None and asking.done.is_set():
            ready, said = asking.result or (False, "no answer")
            asking, next_probe = None, now + PROBE_EVERY_S
            if ready and owners is not None:
                verdict = owners.check()
                ready, said = verdict.own, (said if verdict.own else f"{said}, but {verdict.text}")
                foreign = "" if verdict.own else verdict.text
            if ready:
                return end(0, "ready", READY.format(elapsed=now - start, budget=budget_s, pid=pid_text))
            if said != note:
                say(f"{PREFIX} {said} ({now - start:.1f} s of {budget_s:g} s)")
            note = said
        if now >= next_progress:
            say(f"{PREFIX} still waiting for {url}: {note} ({now - start:.0f} s of {budget_s:g} s)")
            next_progress = now + PROGRESS_EVERY_S
        if asking is not None:
            asking.done.wait(min(PID_POLL_S, deadline - now))
        else:
            time.sleep(max(0.0, min(PID_POLL_S, deadline - now, next_probe - now)))


# --- the unit it gates ----------------------------------------------------------------------


def unit_from_cgroup(text: str) -> tuple[str, str] | None:
    """(unit, scope) from a /proc/PID/cgroup: the innermost .service, 'user' under a user@.service."""
    for line in text.splitlines():
        _, controllers, path = ([*line.split(":", 2), "", ""])[:3]
        if controllers not in ("", "name=systemd"):
            continue
        parts = [p for p in path.split("/") if p]
        services = [i for i, p in enumerate(parts) if p.endswith(".service")]
        if not services:
            continue
        unit = parts[services[-1]]
        user = any(re.fullmatch(r"user@\d+\.service", p) for p in parts[: services[-1]])
        if re.fullmatch(r"user@\d+\.service", unit):
            return None  # the user manager itself, not a unit of it
        return unit, "user" if user else "system"
    return None


def own_unit(mainpid: int | None = None) -> tuple[str, str] | None:
    """The unit this process (or MAINPID) runs in, from the cgroup systemd put it in."""
    for pid in ("self", mainpid):
        if pid is None:
            continue
        try:
            found = unit_from_cgroup(Path(f"/proc/{pid}/cgroup").read_text())
        except OSError:
            continue
        if found:
            return found
    return None


def unit_facts(unit: str, scope: str, *, systemctl: str | None = None) -> dict:
    """What the gate needs of UNIT, from one `systemctl show`: {load_state, timeout_start_s (inf
    for infinity, None when not shown), cgroup, mainpid}; RuntimeError saying why not read."""
    from sparkops.collectors.unitconfig import timespan_s

    argv = [systemctl or os.environ.get("SPARKOPS_SYSTEMCTL") or "systemctl"]
    argv += ["--user"] if scope == "user" else []
    argv += ["show", unit, "-p", "LoadState,TimeoutStartUSec,ControlGroup,MainPID"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"{' '.join(argv)}: {exc}") from None
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()[:200]}")
    props = unit_props(done.stdout)
    if "TimeoutStartUSec" not in props:
        raise RuntimeError(f"{' '.join(argv)} printed no TimeoutStartUSec")
    mainpid = props.get("MainPID", "0")
    return {
        "load_state": props.get("LoadState", ""),
        "timeout_start_s": timespan_s(props["TimeoutStartUSec"]),
        "cgroup": props.get("ControlGroup") or None,
        "mainpid": int(mainpid) if mainpid.isdigit() and int(mainpid) > 0 else None,
    }


def timeout_start_s(unit: str, scope: str, *, systemctl: str | None = None) -> float | None:
    """The unit's TimeoutStartSec in seconds (inf for infinity); RuntimeError saying why not."""
    return unit_facts(unit, scope, systemctl=systemctl)["timeout_start_s"]
