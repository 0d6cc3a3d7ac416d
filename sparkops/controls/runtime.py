"""One runtime directory per install (issue 47 item 3): the folder of the box's start lock and of
the socket the units' stop hooks write to, the same for every command of one install, and never
another install's.

The defaults come from whoever runs the command (root's /run/sparkops, a user's
$XDG_RUNTIME_DIR/sparkops), so `sparkops unit fix` run as root once wrote a stop hook for
/run/sparkops/stopped.sock, where another install's worker listened, while this install's worker
(a user's) only logged that it could not listen there. Now:

- the worker *claims* its runtime directory when it starts (`runtime_claim`): `install.json` in
  it names the install (its var dir), and a directory whose claim names another install whose
  worker still listens is refused, loudly, with what to set instead (and by `sparkops up` before it
  starts anything: `runtime_check`);
- the claim is *recorded* in the install's own var dir (`runtime.json`), where every command of
  that install reads it (`stop_socket()`, `runtime_dir()`): a fix written from any shell names
  the socket of the box's own worker, and launches from any shell share one start lock.
An explicit SPARKOPS_STOP_SOCKET / SPARKOPS_RUNTIME_DIR in the environment still wins."""

from __future__ import annotations

import contextlib
import getpass
import json
import os
from pathlib import Path

from django.conf import settings

from sparkops.poller.stopsocket import in_use

CLAIM = "install.json"  # in the runtime directory: which install's worker holds it
RECORD = "runtime.json"  # in the install's var dir: where its worker listens


class RuntimeHeld(Exception):
    """Another install's live worker holds this runtime directory."""


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)  # never a half-written claim


def runtime_check(*, runtime_dir: str, stop_socket: str, var_dir: str | Path) -> None:
    """Raise RuntimeHeld when another install's claim is on RUNTIME_DIR and its worker's socket is
    live; writes nothing (`sparkops up` asks before it starts anything, its worker then claims)."""
    here, claim = str(Path(var_dir).resolve()), _read(Path(runtime_dir) / CLAIM)
    other = claim.get("var_dir")
    if other and other != here and in_use(str(claim.get("stop_socket") or stop_socket)):
        raise RuntimeHeld(
            f"the runtime directory {runtime_dir} belongs to the SparkOps install at {other} (its worker, pid "
            f"{claim.get('pid', '?')} as {claim.get('user', '?')}, listens on {claim.get('stop_socket')}): this "
            f"install ({here}) would send its units' stop hooks and its launches' lock there. Give it its own: "
            f"SPARKOPS_RUNTIME_DIR={Path(runtime_dir).parent / ('sparkops-' + Path(here).name)} in this install's "
            "environment (every command of it then finds it), or stop the other install's worker"
        )


def runtime_claim(*, runtime_dir: str, stop_socket: str, var_dir: str | Path) -> dict:
    """Take RUNTIME_DIR for the install at VAR_DIR, whose worker listens on STOP_SOCKET; returns
    the claim written. RuntimeHeld when another install's claim is there and its worker's socket
    is live (a claim whose worker is gone is taken over)."""
    runtime_check(runtime_dir=runtime_dir, stop_socket=stop_socket, var_dir=var_dir)
    here, claim_path = str(Path(var_dir).resolve()), Path(runtime_dir) / CLAIM
    mine = {"var_dir": here, "stop_socket": stop_socket, "pid": os.getpid(), "user": getpass.getuser()}
    _write(claim_path, mine)
    _write(Path(var_dir) / RECORD, {"runtime_dir": str(runtime_dir), "stop_socket": stop_socket})
    return mine


def recorded() -> dict:
    """What this install's worker recorded at its start ({runtime_dir, stop_socket}), or {}."""
    return _read(Path(settings.VAR_DIR) / RECORD)


def stop_socket() -> str:
    """The socket this install's worker listens on: SPARKOPS_STOP_SOCKET when the environment sets it,
    else what the worker recorded, else the setting's default."""
    if os.environ.get("SPARKOPS_STOP_SOCKET"):
        return settings.SPARKOPS_STOP_SOCKET
    return str(recorded().get("stop_socket") or settings.SPARKOPS_STOP_SOCKET)


def runtime_dir() -> str:
    """This install's runtime directory, by the same rule as `stop_socket`."""
    if os.environ.get("SPARKOPS_RUNTIME_DIR"):
        return settings.SPARKOPS_RUNTIME_DIR
    return str(recorded().get("runtime_dir") or settings.SPARKOPS_RUNTIME_DIR)


def release(*, runtime_dir: str, var_dir: str | Path) -> None:
    """Drop this install's claim (a worker that stops); another install's is left alone."""
    path = Path(runtime_dir) / CLAIM
    if _read(path).get("var_dir") == str(Path(var_dir).resolve()):
        with contextlib.suppress(OSError):
            path.unlink()
