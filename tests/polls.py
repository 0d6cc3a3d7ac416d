"""One poll the way `sparkops poll --once` makes it: a poller of its own, one tick, a flush."""

from sparkops.poller.entrypoints import poll_once


def poll(*engines):
    """The readings of ENGINES after one tick (the host's sources are read too)."""
    return poll_once(engines=engines)["engines"]


def poll_one(engine):
    return poll(engine)[0]
