"""One poller per box: the box's lease in Redis (`PollerLease`), which the fleet's leader also
takes to adopt the box (`Adoptions`); and one runner of the fleet's upkeep (`UpkeepLease`).

A second worker started for the same host (a scaled compose service, `sparkops up` beside a
hand-started worker) finds the lease taken and polls nothing until the holder is gone, so no
engine is sampled twice. Extra task-only workers: `sparkops worker --no-poller`.

Adoption and hand-back go through the same key, so an engine is polled by one worker at a time:
the leader adopts a box only once its worker's lease has expired (it renewed nothing for TTL_S:
dead, or cut off from Redis), and checks it holds the key before every tick. The box's own
worker comes first: finding its key held by an adopter, it writes a claim; the adopter gives
the key up at its next tick and adopts nothing while a claim stands; the box takes its key
back at its next check (RETRY_S). Between the two, for a tick or two, nobody polls the box:
a gap, never a second poller.

Fencing: each taking of a box's key (by its worker or an adopter) increments the box's counter
in Redis in the same script, and the holder's stores carry that number (`fence`); the store
refuses one smaller than the last stored with the host (`Host.fence`, `pending.PendingWrites`).
A holder that stalled past TTL_S between its check and its store (paused, swapped out, a long
GC) finds its late rows refused instead of overwriting the new holder's. Redis down: the
holder polls unfenced (fence None), as it polls anyway."""

import contextlib
import logging
import os
import socket
import threading
import time
import uuid

from django.conf import settings

from sparkops.alerts.conf import upkeep_runs_key

log = logging.getLogger(__name__)


class PollerLease:
    """The right to poll one host, held in Redis by one poller at a time.

    redis-py's `Lock` (SET NX PX with a token; renewal and release by a script that checks the
    token, so only the holder renews or frees it), not blocking, with `thread_local=False`: the
    probe and metrics threads share one lease. Renewed every `RENEW_S` for `TTL_S`, so a poller
    that dies frees the box within TTL_S. The token names the holder (host:pid:random), which the
    warning of a second poller shows. Redis unreachable: poll anyway (a box polled twice for a
    while is better than a box not watched)."""

    TTL_S, RENEW_S = 15.0, 5.0
    RETRY_S = 1.0  # how soon it asks again while Redis is unreachable or an adopter gives the box back

    def __init__(self, host_name, url=None):
        import redis

        self.key = box_key(host_name)
        self.token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.client = redis.Redis.from_url(
            url or settings.CELERY_BROKER_URL, socket_timeout=1.0, socket_connect_timeout=1.0
        )
        self.lock = self.client.lock(self.key, timeout=self.TTL_S, blocking=False, thread_local=False)
        self.held, self.checked_at, self.warned = False, float("-inf"), False
        self.fence: int | None = None  # the fencing token of this holding; None: unfenced (Redis down)
        self._lock = threading.Lock()  # the probe and metrics threads both ask

    def holds(self):
        """Whether this poller may poll now (asks Redis at most every RENEW_S)."""
        with self._lock:
            return self._holds()

    def _holds(self):
        from redis.exceptions import LockError

        now = time.monotonic()
        if now - self.checked_at < self.RENEW_S:
            return self.held
        self.checked_at = now
        try:
            if self.held:
                try:
                    self.held = self.lock.reacquire()  # TTL_S again, if the token is still ours
                except LockError:  # expired, or taken by another poller meanwhile
                    self.held = False
            if not self.held:
                self.held = self._acquire()
                if self.held:
                    self.client.delete(claim_key(self.key))
                elif self._claim():
                    self.checked_at = now - self.RENEW_S + self.RETRY_S
                elif not self.warned:
                    log.warning(
                        "another poller holds %s (%s): this worker polls nothing until it is gone; "
                        "run extra workers with --no-poller",
                        self.key,
                        self.client.get(self.key),
                    )
                    self.warned = True
        except Exception as exc:  # Redis down: fail open
            log.warning("poller lease %s unknown (%s): polling anyway", self.key, exc)
            self.held, self.fence = True, None
            # Back from a partition, an adopter holds the box: find it out within RETRY_S.
            self.checked_at = now - self.RENEW_S + self.RETRY_S
        return self.held

    def _acquire(self) -> bool:
        """Take the key if free, with the next fencing token (one script: no holder after this
        one can have taken a smaller token)."""
        fence = int(self.client.eval(ACQUIRE, 2, self.key, fence_key(self.key), self.token, int(self.TTL_S * 1000)))
        if not fence:
            return False
        self.lock.local.token = self.token.encode()  # the Lock renews and frees it as its own
        self.fence = fence
        return True

    def refence(self, stored: int) -> int | None:
        """A new token above STORED (the host's, which refused this holder's store) while this
        poller still holds the key: Redis lost its counter (restarted without persistence) and
        counts from 1 again. None when it holds the key no longer: the refusal was right."""
        with self._lock:
            fence = int(self.client.eval(REFENCE, 2, self.key, fence_key(self.key), self.token, stored))
            self.fence = fence or self.fence
            return fence or None

    def _claim(self):
        """When the fleet's leader holds this box (adopted while this worker could not renew):
        ask for it back (`Adoptions.settle` gives it up); whether it did."""
        holder = self.client.get(self.key)
        if not isinstance(holder, bytes) or not holder.startswith(ADOPTER):
            return False
        self.client.set(claim_key(self.key), self.token, px=int(self.TTL_S * 1000))
        return True

    def release(self):
        with contextlib.suppress(Exception):  # not ours any more, or Redis gone: it expires on its own
            self.lock.release()


# KEYS: the box's lease, its fence counter. ARGV: token, ttl ms. The new fencing token, or 0
# when another holds the key.
ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.call('INCR', KEYS[2]) end
return 0
"""
# KEYS: the box's lease, its fence counter. ARGV: token, the host's stored fence. A token above
# it while ARGV[1] holds the key, else 0.
REFENCE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local fence = redis.call('INCR', KEYS[2])
if fence <= tonumber(ARGV[2]) then
  fence = tonumber(ARGV[2]) + 1
  redis.call('SET', KEYS[2], fence)
end
return fence
"""
ADOPTER = b"adopt:"  # an adopting leader's tokens begin so
# KEYS: the box's lease, its claim, its fence counter. ARGV: token, ttl ms, "1" to hold it, "0"
# to give it up. The fencing token when the token holds the box after the call, else 0. A claim
# by the box's own worker wins.
SETTLE = """
local holder = redis.call('GET', KEYS[1])
if ARGV[3] == '0' or redis.call('EXISTS', KEYS[2]) == 1 then
  if holder == ARGV[1] then redis.call('DEL', KEYS[1]) end
  return 0
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(redis.call('GET', KEYS[3]) or '0')
end
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return redis.call('INCR', KEYS[3])
end
return 0
"""


def box_key(host_name: str) -> str:
    return f"{settings.SPARKOPS_CHANNEL_PREFIX}:poller:{host_name}"


def fence_key(key: str) -> str:
    """The box's fencing counter: never expires (a lease's tokens must outlive any holder)."""
    return f"{key}:fence"


def claim_key(key: str) -> str:
    return f"{key}:claim"


class Adoptions:
    """The boxes the fleet's leader polls for workers that stopped reporting, each under the
    box's own `PollerLease` key (an `adopt:` token), so the box's worker and its adopter never
    poll at once. `settle` is asked before every tick: one round trip (a script per box,
    pipelined). Redis unreachable: every orphan is adopted (fail open, as `PollerLease`)."""

    def __init__(self, leader_name: str, url: str | None = None):
        import redis

        self.token = f"{ADOPTER.decode()}{leader_name}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.client = redis.Redis.from_url(
            url or settings.CELERY_BROKER_URL, socket_timeout=1.0, socket_connect_timeout=1.0
        )
        self.script = self.client.register_script(SETTLE)
        self.held: set[str] = set()
        self.fences: dict[str, int | None] = {}  # each held box's fencing token (None: unfenced)
        self._lock = threading.Lock()

    def settle(self, orphans) -> set[str]:
        """Which of ORPHANS (host names) this leader may poll now; the boxes it held and that are
        no longer orphans, or that their worker claims back, are given up."""
        orphans = set(orphans)
        with self._lock:
            names = sorted(orphans | self.held)
            if not names:
                return set()
            try:
                pipe = self.client.pipeline(transaction=False)
                for name in names:
                    key = box_key(name)
                    wanted = "1" if name in orphans else "0"
                    self.script(
                        keys=[key, claim_key(key), fence_key(key)],
                        args=[self.token, int(PollerLease.TTL_S * 1000), wanted],
                        client=pipe,
                    )
                fences: dict[str, int | None] = {name: int(got) for name, got in zip(names, pipe.execute()) if got}
            except Exception as exc:
                log.warning("adoption leases unknown (%s): adopting every orphan", exc)
                fences = dict.fromkeys(orphans)
            held = set(fences)
            self.fences = fences
            for name in sorted(held - self.held):
                log.warning("adopted %s: its worker's lease expired", name)
            for name in sorted(self.held - held):
                log.warning("gave %s back (its worker claimed it, or reports again)", name)
            self.held = held
            return held

    def release(self):
        """Give every adopted box up (the worker stops, or no longer leads)."""
        with contextlib.suppress(Exception):
            self.settle(())


class UpkeepLease(PollerLease):
    """The right to run the fleet's upkeep (outbox sweep, collector-stale check), held by the
    leader: when leadership moves (the leader dies, or one back from a partition sorts first),
    the old leader's lease must expire or be released before the new one runs anything, so
    no upkeep runs twice. Each run is recorded (`ran`): which box ran which duty when."""

    RECORD = 1000  # runs kept in the record (a few minutes' worth)

    def __init__(self, host_name, url=None):
        super().__init__(host_name, url)
        self.key = f"{settings.SPARKOPS_CHANNEL_PREFIX}:fleet:upkeep"
        self.lock = self.client.lock(self.key, timeout=self.TTL_S, blocking=False, thread_local=False)
        self.host_name, self.warned = host_name, True  # another leader holding it is no mistake

    def _claim(self):
        return False

    # The duties whose runs are recorded: the ones beat's backstops stand in for (alerts.conf.leader_ran)
    # and that must never run twice at once. The live grid's deltas (every 2 s) and the heartbeat are
    # upkeep too, but nothing reads their record: writing it was 2.6 % of the leading worker's CPU.
    RECORDED = frozenset({"alerts-sweep-outbox", "alerts-check-stale"})

    def ran(self, duty: str) -> None:
        """Record that DUTY ran here now (`{prefix}:fleet:upkeep:runs`, newest first), if it is RECORDED."""
        if duty not in self.RECORDED:
            return
        with contextlib.suppress(Exception):
            runs = upkeep_runs_key()
            pipe = self.client.pipeline(transaction=False)
            pipe.lpush(runs, f"{time.time():.3f} {self.host_name} {duty}")
            pipe.ltrim(runs, 0, self.RECORD - 1)
            pipe.expire(runs, 3600)
            pipe.execute()

    def forfeit(self) -> None:
        """Give it up now (no longer the leader): the next leader runs the upkeep at once."""
        with self._lock:
            if self.held:
                self.release()
            self.held, self.checked_at = False, float("-inf")
