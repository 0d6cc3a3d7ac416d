"""Waiting on real processes and threads without fixed sleeps."""

import time

import httpx


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
        return httpx.get(url + "/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False
