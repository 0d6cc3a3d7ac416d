"""Waiting on real processes and threads without fixed sleeps."""

import time


def wait_for(predicate, timeout=15.0, step=0.05):
    """True as soon as PREDICATE() is true, False after TIMEOUT seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False
