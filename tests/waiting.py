"""Waiting on real processes and threads without fixed sleeps."""

import time

import httpx

from dashboard.http import sync_client


def wait_for(predicate, timeout=15.0, step=0.05):
    """True as soon as PREDICATE() is true, False after TIMEOUT seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


def serves(url, timeout=2.0):
    """Whether the engine at URL answers /health with 200 now."""
    try:
        return sync_client().get(url + "/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


# A resident poller a test ticks by hand (never started) and whose tick's readings it asserts on:
# a tick waits up to 40 % of the poll interval for its engines and returns the moment they have
# answered. The product's 2 s interval left a loaded CI box 0.8 s for a tick's first fetch (a new
# client, a connect), and it once missed it; this interval waits long enough for any box.
HAND_TICKED = 30.0
