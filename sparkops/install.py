"""One install, whichever shell: where an install's state lives, and what its running stack uses.

`sparkops up` without REDIS_URL starts a private Redis on a free port. A command run from
another shell (`sparkops bench sweep`, `probe run`, `alerts test-channel`) never saw that port, so
its own requests were counted in another Redis (or none) and the stack judged them as the
operator's. So `up` records what its children were given in VAR_DIR/stack.json (0600: a
DATABASE_URL may hold a password) and removes it when it stops; settings read it where the
environment says nothing. The record counts only while `up` holds VAR_DIR/up.lock: an `up` that
was SIGKILLed leaves the file behind, and the free lock says it is stale (a pid could be reused).

Nothing here imports Django: the console script asks `install_missing` before settings load,
because loading them writes the generated secret_key."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

STACK_FILE = "stack.json"
LOCK_FILE = "up.lock"
DATABASE_FILE = "sparkops.sqlite3"
# What `up` passes to its children that a command from another shell must agree on.
RECORDED = ("REDIS_URL", "DATABASE_URL", "SPARKOPS_CHANNEL_PREFIX")


def var_dir(base_dir: Path) -> tuple[Path, str]:
    """(where the state lives, why there): SPARKOPS_VAR_DIR; else systemd's StateDirectory=
    ($STATE_DIRECTORY, its first path); else var/ of the checkout being run from (a manage.py in
    the working directory, or beside the code at BASE_DIR); else $XDG_STATE_HOME/sparkops
    (~/.local/state/sparkops). Never inside an installed package."""
    given = os.environ.get("SPARKOPS_VAR_DIR", "")
    if given:
        return Path(given).expanduser(), "SPARKOPS_VAR_DIR"
    state = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    if state:
        return Path(state), "STATE_DIRECTORY (systemd's StateDirectory=)"
    for checkout in (Path.cwd(), base_dir):
        if (checkout / "manage.py").is_file() and (checkout / "sparkops").is_dir():
            return checkout / "var", f"the checkout at {checkout}"
    xdg = os.environ.get("XDG_STATE_HOME", "")
    if xdg.startswith("/"):
        return Path(xdg) / "sparkops", "XDG_STATE_HOME"
    return Path.home() / ".local" / "state" / "sparkops", "the default (neither SPARKOPS_VAR_DIR nor a checkout)"


def stack_running(var: Path) -> bool:
    """Whether an `up` holds VAR/up.lock now. A shared lock is refused while `up` holds its
    exclusive one; taken, it is let go at once."""
    try:
        handle = open(var / LOCK_FILE)  # noqa: SIM115 (closed below, whichever way it went)
    except OSError:
        return False
    try:
        fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        handle.close()  # closing also lets go of a lock taken
    return False


def stack_record(var: Path, values: dict[str, str], *, pid: int) -> Path:
    """Write what the stack's children were given (VALUES, by environment name) for the life of
    `up` (pid PID); returns the file. Written whole, then renamed: a reader never sees half."""
    path = var / STACK_FILE
    tmp = var / f".{STACK_FILE}.{pid}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"pid": pid, **{k: v for k, v in values.items() if k in RECORDED and v}}, fh)
    os.replace(tmp, path)
    return path


def stack_forget(var: Path, *, pid: int) -> None:
    """Remove the record when its `up` (PID) stops; one written by another `up` is left alone."""
    if stack_read(var).get("pid") == pid:
        (var / STACK_FILE).unlink(missing_ok=True)


def stack_read(var: Path) -> dict:
    """The record as written ({} when none, or unreadable)."""
    try:
        data = json.loads((var / STACK_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def stack_values(var: Path) -> dict[str, str]:
    """What the running stack of VAR was given ({} when no stack runs): settings take each
    value the environment does not set."""
    if not (var / STACK_FILE).is_file() or not stack_running(var):
        return {}
    return {k: v for k, v in stack_read(var).items() if k in RECORDED and isinstance(v, str) and v}


def install_missing(base_dir: Path) -> str | None:
    """Why no install is found here (its database cannot be where settings would look), in words
    that say where it looked; None when there may be one. Only SQLite's file can be missing:
    a DATABASE_URL names a server, whose tables are asked for once settings load."""
    var, why = var_dir(base_dir)
    if os.environ.get("DATABASE_URL") or os.environ.get("DATABASE_URL_FILE") or stack_values(var).get("DATABASE_URL"):
        return None
    database = var / DATABASE_FILE
    if database.is_file():
        return None
    return (
        f"no SparkOps install here: no database at {database} (the var dir, from {why}), DATABASE_URL is not set "
        f"and no running stack names one. Start one there with `sparkops up`, or point SPARKOPS_VAR_DIR or "
        f"DATABASE_URL at the install you mean. Nothing was created."
    )
