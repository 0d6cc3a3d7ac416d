"""Stand-ins for systemctl, journalctl and nvidia-smi that read SPARKOPS_SIM_STATE_DIR."""

import os
import sys
from pathlib import Path


def state_dir() -> Path:
    value = os.environ.get("SPARKOPS_SIM_STATE_DIR")
    if not value:
        print("SPARKOPS_SIM_STATE_DIR is not set", file=sys.stderr)
        sys.exit(1)
    return Path(value)


def unit_name(name: str) -> str:
    return name if "." in name else f"{name}.service"
