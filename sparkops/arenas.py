"""Cap glibc's malloc arenas in a process of many threads (the worker's, beat's; sparkops/celery.py).

glibc gives each thread that meets a busy arena one of its own, up to eight per core, and keeps
what each one freed: the worker (a poller's threads, Celery's pool, the exit watch) and beat
(five threads, four arenas) held 8 MB more than with two (poll-overhead bench: worker + beat PSS
201 MB, 193 MB capped; CPU the same within its noise). glibc fixes the limit when a thread first
needs a second arena: the cap must come before the process starts its threads. MALLOC_ARENA_MAX=2 does it only when set before the process starts (a unit's
Environment=, compose's environment:); mallopt(M_ARENA_MAX) does it from inside, for the arenas
not made yet, whatever started the worker. No maintained library wraps mallopt: this is ctypes,
and a libc without it (musl) is left as it is."""

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)
M_ARENA_MAX = -8  # glibc's malloc.h
ARENAS = 2


def cap_arenas(arenas: int = ARENAS) -> bool:
    """Allow at most ARENAS malloc arenas from now on; whether the C library took it."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    taken = mallopt(M_ARENA_MAX, arenas) == 1
    if not taken:
        log.debug("mallopt(M_ARENA_MAX, %d) was refused", arenas)
    return taken
