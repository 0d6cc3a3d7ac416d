"""The one way collectors run a host command (systemctl, journalctl, nvidia-smi): bounded
in time, output decoded leniently, and every way it can fail to run a `CommandError`
whose words go on the card — never an exception that ends a host poll."""

import subprocess
from collections.abc import Sequence


class CommandError(Exception):
    pass


def run(argv: Sequence[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    """The finished process whatever its exit status (undecodable bytes replaced);
    CommandError when it is missing, not runnable, or gives no answer within `timeout`."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout, check=False)
    except FileNotFoundError:
        raise CommandError(f"{argv[0]}: not found") from None
    except subprocess.TimeoutExpired:
        raise CommandError(f"{argv[0]}: no answer in {timeout} s") from None
    except OSError as exc:  # not executable, exec format error...
        raise CommandError(f"{argv[0]}: {exc.strerror or exc}") from None


def output(argv: Sequence[str], *, timeout: float) -> str:
    """stdout of a command that must exit 0; CommandError with its own words otherwise."""
    done = run(argv, timeout=timeout)
    if done.returncode != 0:
        raise CommandError(f"{argv[0]} exit {done.returncode}: {(done.stderr or done.stdout).strip()[:200]}")
    return done.stdout
