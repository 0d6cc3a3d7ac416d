"""One cold start at a time per box, for `sparkops launch`: the box's start lock (an flock on
SPARKOPS_RUNTIME_DIR/launch.lock whose content names the holder), and the wait for the box's unit
engines that are inside their start. A launch that finds either busy waits, or with --no-wait is
refused naming what it waits for."""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from django.utils import timezone

from sparkops.gate import readiness

from .launchplan import PREFIX, Refused
from .runtime import runtime_dir as install_runtime_dir

if TYPE_CHECKING:
    from dashboard.models import Host

WAIT_POLL_S = 0.2


# --- 2. one cold start at a time ------------------------------------------------------------


class Holder(TypedDict):
    """What the start lock's file says of its holder."""

    engine: str
    kind: str
    url: str
    pid: int
    since: float


class BoxLock:
    """The box's start lock: an flock on RUNTIME_DIR/launch.lock whose content names the holder."""

    def __init__(self, runtime_dir: str | os.PathLike[str] | None = None) -> None:
        self.dir = Path(runtime_dir or install_runtime_dir())  # the install's, from any shell (runtime.py)
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

    def holder(self) -> dict[str, Any]:
        try:
            return json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}

    def write_holder(self, info: Holder) -> None:
        os.ftruncate(self._file(), 0)
        os.pwrite(self._file(), json.dumps(info).encode(), 0)


def holder_text(info: Mapping[str, Any]) -> str:
    since = info.get("since")
    when = time.strftime("%H:%M:%S UTC", time.gmtime(since)) if since else "an unknown time"
    what = info.get("engine") or "an engine"
    pid = f", pid {info['pid']}" if info.get("pid") else ""
    return f"{what} ({info.get('kind', '?')} at {info.get('url', '?')}{pid}) is inside its start since {when}"


def acquire(
    lock: BoxLock,
    host: Host,
    *,
    no_wait: bool,
    say: Callable[[str], object],
    clock: Callable[[], float] = time.monotonic,
) -> float:
    """Hold LOCK and wait out the box's unit engines' starts; the seconds waited. Refused with
    --no-wait when either is busy."""
    began = clock()
    said: str | None = None
    while not lock.try_acquire():
        why = f"another launch: {holder_text(lock.holder())}"
        if no_wait:
            raise Refused(f"refused (--no-wait): {why}")
        if why != said:
            say(f"{PREFIX} waiting: {why}")
            said = why
        time.sleep(WAIT_POLL_S)
    while (starting := unit_start(host)) is not None:
        if no_wait:
            raise Refused(f"refused (--no-wait): {starting}")
        if starting != said:
            say(f"{PREFIX} waiting: {starting}")
            said = starting
        time.sleep(1.0)
    return clock() - began


def unit_start(host: Host, *, own_unit: str | None = None) -> str | None:
    """Why one of the box's unit engines is activating (what its worker last stored), or None. OWN_UNIT
    (default: the unit this process runs in, when `sparkops launch` is a unit's ExecStart=) is not
    waited for: it is this very start."""
    from dashboard.models import Engine
    from sparkops.launch.starts import parse_timestamp
    from sparkops.measured.conditions import STALE_HOST_S

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
