"""The seams between the collectors and their consumers (alerts, live view).

Collectors send these after the poll's rows are committed; receivers must not raise
(a receiver's failure is logged by `send_robust`, never a crash of the poll)."""
from django.dispatch import Signal

# Once per metrics cycle, for all the engines it polled (receivers read what they need for
# all of them in one query, not one per engine).
# kwargs: polled (list of (Engine, reading) pairs; reading: one engine object as `poll --json` prints it)
engines_polled = Signal()
# kwargs: engine (Engine), up (bool), reason (str), checked_at (datetime), rechecked (bool),
# status ("up"|"loading"|"down"), changed (bool: Engine.status moved with this probe)
engine_liveness = Signal()
# kwargs: host (Host), reading (dict: {"host": ..., "gpus": [...], "processes": {...}, "units": {...}})
host_polled = Signal()
