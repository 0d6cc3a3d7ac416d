"""Stand-ins for systemctl, journalctl and nvidia-smi that read SPARKOPS_SIM_STATE_DIR.

They run thousands of times a test run, each a new Python (`python -S`): what they import is
their start, so their paths are strings (os.path), not pathlib's, whose import (with fnmatch and
urllib.parse) was a third of a `systemctl show` call (bench/sim_tools.py)."""

import os
import sys


def state_dir() -> str:
    value = os.environ.get("SPARKOPS_SIM_STATE_DIR")
    if not value:
        print("SPARKOPS_SIM_STATE_DIR is not set", file=sys.stderr)
        sys.exit(1)
    return value


def state_path(*parts: str) -> str:
    """A path under the state dir."""
    return os.path.join(state_dir(), *parts)


def read_text(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def unit_name(name: str) -> str:
    return name if "." in name else f"{name}.service"
