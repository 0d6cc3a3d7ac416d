"""A real systemd (Debian's 252) as a user manager with its own journald, for tests.

PID 1 here is not systemd, but `systemd --user` runs as root inside a private mount namespace
(issue 26): a tmpfs on /run/systemd holding /run/systemd/system (so the manager believes the box
booted with systemd) and journald's sockets, and a tmpfs on /run/log so this journald's files are
its own (several managers may run at once: one per xdist worker, one per concurrent test run).
Before it execs the manager the shell moves itself into a cgroup `<slice>/user@0.service` in the
v2 (unified) and name=systemd hierarchies: the `user@…service` name makes journald credit each
unit's output to `_SYSTEMD_USER_UNIT`; the slice is this manager's own, so managers never share a
cgroup.

Everything else talks to it from outside: `systemctl --user` through XDG_RUNTIME_DIR's
`systemd/private` socket (no D-Bus needed), `journalctl -D /proc/<journald>/root/run/log/journal`
(the namespace's journal, seen through the journald process's root) — `journalctl_wrapper()` writes
a one-line script that adds that `-D`, for SPARKOPS_JOURNALCTL.

`stop()` kills every process of the namespace (the manager's cgroup tree, then journald) and
removes the cgroup directories it made."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from dashboard.systemctl_show import unit_props

SYSTEMD = "/usr/lib/systemd/systemd"
JOURNALD = "/usr/lib/systemd/systemd-journald"
CGROUP_ROOT = Path("/sys/fs/cgroup")
HIERARCHIES = ("unified", "systemd")  # the v2 mount beside v1, and v1's name=systemd

SCRIPT = r"""
set -e
mount -t tmpfs tmpfs /run/systemd
mkdir -p /run/systemd/system /run/systemd/journal /run/log
mount -t tmpfs tmpfs /run/log
%(journald)s &
echo $! > "$HARNESS_DIR/journald.pid"
i=0
while [ ! -S /run/systemd/journal/socket ] || [ ! -S /run/systemd/journal/stdout ]; do
  i=$((i+1)); [ $i -lt 1500 ] || { echo "journald did not come up" >&2; exit 1; }
  sleep 0.02
done
for cg in $HARNESS_CGROUPS; do mkdir -p "$cg"; echo $$ > "$cg/cgroup.procs"; done
exec %(systemd)s --user --log-target=journal
"""


def unavailable():
    """Why a real user manager cannot run here, or None."""
    if os.geteuid() != 0:
        return "real systemd tests need root (a private mount namespace and cgroups)"
    for path in (SYSTEMD, JOURNALD):
        if not os.access(path, os.X_OK):
            return f"no {path}: systemd is not installed"
    for tool in ("unshare", "systemctl", "journalctl"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH"
    missing = [h for h in HIERARCHIES if not (CGROUP_ROOT / h / "cgroup.procs").exists()]
    if missing:
        return f"no cgroup hierarchy at {', '.join(str(CGROUP_ROOT / h) for h in missing)}"
    return None


class UserManager:
    def __init__(self, root: Path, tag: str):
        self.root = Path(root)
        self.tag = tag  # unique per manager: names its slice
        self.runtime_dir = self.root / "run"
        self.config_home = self.root / "config"
        self.unit_dir = self.config_home / "systemd" / "user"
        self.slice = f"sparkops_test_{tag}.slice"
        self.cgroups = [CGROUP_ROOT / h / self.slice / "user@0.service" for h in HIERARCHIES]
        self.process: subprocess.Popen | None = None
        self.journald_pid: int | None = None
        self.started_in_s: float | None = None

    # --- environment ------------------------------------------------------------------------

    @property
    def env(self) -> dict:
        """What a process outside needs to reach the manager (`systemctl --user`)."""
        return {"XDG_RUNTIME_DIR": str(self.runtime_dir), "XDG_CONFIG_HOME": str(self.config_home)}

    @property
    def journal_dir(self) -> Path:
        return Path(f"/proc/{self.journald_pid}/root/run/log/journal")

    def journalctl_wrapper(self) -> Path:
        path = self.root / "journalctl"
        path.write_text(f'#!/bin/sh\nexec journalctl -D {self.journal_dir} "$@"\n')
        path.chmod(0o755)
        return path

    # --- life -------------------------------------------------------------------------------

    def start(self, timeout: float = 60.0):
        began = time.monotonic()
        self.runtime_dir.mkdir(parents=True, exist_ok=True)
        self.runtime_dir.chmod(0o700)
        self.unit_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            **self.env,
            "HARNESS_DIR": str(self.root),
            "HARNESS_CGROUPS": " ".join(str(c) for c in self.cgroups),
        }
        env.pop("DBUS_SESSION_BUS_ADDRESS", None)
        script = SCRIPT % {"journald": JOURNALD, "systemd": SYSTEMD}
        self.log = open(self.root / "manager.log", "wb")  # noqa: SIM115 (the manager's log, closed in stop())
        self.process = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        try:
            while True:
                if self.journald_pid is None and (self.root / "journald.pid").exists():
                    text = (self.root / "journald.pid").read_text().strip()
                    self.journald_pid = int(text) if text else None
                if self.process.poll() is not None:
                    raise RuntimeError(f"the user manager exited ({self.process.returncode}): {self.log_text()}")
                if self.journald_pid and (self.runtime_dir / "systemd" / "private").exists():
                    done = self.systemctl("show-environment", check=False)
                    if done.returncode == 0:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no answer from the user manager in {timeout} s: {self.log_text()}")
                time.sleep(0.02)
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - began
        return self

    def log_text(self) -> str:
        try:
            return (self.root / "manager.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def _tree_pids(self) -> set[int]:
        pids: set[int] = set()
        for top in self.cgroups:
            if not top.exists():
                continue
            for dirpath, _dirs, files in os.walk(top):
                if "cgroup.procs" in files:
                    with contextlib.suppress(OSError):
                        pids.update(int(p) for p in (Path(dirpath) / "cgroup.procs").read_text().split())
        return pids

    def stop(self, timeout: float = 30.0):
        """Kill every process of the namespace and remove the cgroups made; idempotent."""
        deadline = time.monotonic() + timeout
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)  # the manager (the shell exec'd it)
        while True:
            pids = self._tree_pids()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not pids or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        if self.journald_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.journald_pid, signal.SIGKILL)
            self._reap(self.journald_pid, deadline)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=max(1.0, deadline - time.monotonic()))
        for top in self.cgroups + [c.parent for c in self.cgroups]:
            self._rmtree(top, deadline)
        if getattr(self, "log", None):
            self.log.close()

    @staticmethod
    def _reap(pid, deadline):
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            # journald is the unshare'd shell's child, reparented to init when it exec'd; wait if ours
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            if Path(f"/proc/{pid}/status").exists():
                try:
                    if "State:\tZ" in Path(f"/proc/{pid}/status").read_text():
                        break  # a zombie: no longer runs; its parent reaps it
                except OSError:
                    break
            time.sleep(0.02)

    @staticmethod
    def _rmtree(top: Path, deadline):
        if top.name.endswith(".slice") and top.parent.name not in HIERARCHIES:
            return
        while top.exists():
            dirs = sorted((Path(d) for d, _s, _f in os.walk(top)), key=lambda p: len(p.parts), reverse=True)
            busy = False
            for d in dirs:
                try:
                    d.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    busy = True
            if not busy or time.monotonic() > deadline:
                break
            time.sleep(0.02)

    # --- talking to it ----------------------------------------------------------------------

    def systemctl(self, *args, check=True, timeout=30):
        done = subprocess.run(
            ["systemctl", "--user", *args, "--no-pager"],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"systemctl --user {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
        return done

    def show(self, unit, *props) -> dict:
        text = self.systemctl("show", unit, *(["-p", ",".join(props)] if props else [])).stdout
        return unit_props(text)

    def journal(self, *args) -> list[dict]:
        import json

        done = subprocess.run(
            ["journalctl", "-D", str(self.journal_dir), "-o", "json", "--no-pager", *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    def write_unit(self, name: str, text: str) -> Path:
        path = self.unit_dir / name
        path.write_text(text)
        return path

    def write_drop_in(self, unit: str, name: str, text: str) -> Path:
        folder = self.unit_dir / f"{unit}.d"
        folder.mkdir(exist_ok=True)
        path = folder / name
        path.write_text(text)
        return path
