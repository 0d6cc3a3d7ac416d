"""Viewer presence: is a live WebSocket open anywhere? The sample pushes ask before they render.

Rendering every card and sending it to groups nobody listens to was most of the watcher's
CPU with no browser open. So each open socket (consumers.py) keeps one Redis key alive —
`<channel prefix>:live:viewers`, TTL `SPARKOPS_LIVE_PRESENCE_TTL` (60 s), set on connect and
refreshed every TTL/3 while the socket is open — and the publishing side (the poller's
receivers) reads it at most once per `SPARKOPS_LIVE_PRESENCE_CACHE` (2 s) per process.

- A page that opens a socket gets samples again within one poll interval plus the cache.
- A socket of THIS process answers "present" here at once (tests, a single-process stack).
- After the last socket closes, pushes stop once the key expires (TTL) and the cache ages.
- Redis unreachable, or a channel layer that is not Redis: "present" (fail open: losing
  pushes because the check failed is worse than rendering a card for nobody). Nothing here
  raises into a poll.

Only the frequent, droppable samples are gated ("engine.sample", "host.sample"); alert and
change-log events always go out."""
import logging
import threading
import time

from django.conf import settings

log = logging.getLogger(__name__)

DEFAULT_TTL_S = 60.0
DEFAULT_CACHE_S = 2.0
# Short: the check runs in the poll thread, and a socket's connect waits for its mark.
REDIS_TIMEOUT_S = 0.25


def ttl_s():
    return float(getattr(settings, "SPARKOPS_LIVE_PRESENCE_TTL", DEFAULT_TTL_S))


def refresh_s():
    """How often an open socket refreshes the key: three chances before it expires."""
    return ttl_s() / 3


def cache_s():
    return float(getattr(settings, "SPARKOPS_LIVE_PRESENCE_CACHE", DEFAULT_CACHE_S))


def _redis_target():
    """(redis URL, channel prefix) of the default channel layer, or None when it is not Redis."""
    config = (getattr(settings, "CHANNEL_LAYERS", None) or {}).get("default") or {}
    if "redis" not in str(config.get("BACKEND", "")).lower():
        return None
    options = config.get("CONFIG") or {}
    hosts = options.get("hosts") or [("127.0.0.1", 6379)]
    first = hosts[0]
    address = first.get("address") if isinstance(first, dict) else first
    if isinstance(address, (tuple, list)) and len(address) == 2:
        address = f"redis://{address[0]}:{address[1]}/0"
    if not isinstance(address, str) or "://" not in address:
        return None  # sentinels and other shapes: fail open rather than guess
    return address, options.get("prefix", "asgi")


class Presence:
    """One per process. `present()` is for the publishers, `mark()`/`forget()` for the sockets."""

    def __init__(self):
        self._lock = threading.Lock()
        self._clients = {}  # redis URL -> client (thread-safe pool; redis-py re-pools after a fork)
        self.reset()

    def reset(self):
        """Forget every local answer and mark (tests; the Redis key is left alone)."""
        self._answer = None  # last answer, good for cache_s() from _answered_at
        self._answered_at = 0.0
        self._marked_at = float("-inf")  # last successful SET by this process
        self._local_sockets = 0  # sockets open in this process
        self._failing = False
        self.lookups = 0  # Redis reads made by present(): what the no-viewer case costs

    def _client(self):
        target = _redis_target()
        if target is None:
            return None, None
        url, prefix = target
        client = self._clients.get(url)
        if client is None:
            import redis

            with self._lock:
                client = self._clients.get(url) or redis.Redis.from_url(
                    url, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S)
                self._clients[url] = client
        return client, f"{prefix}:live:viewers"

    # -- publishing side ---------------------------------------------------------------
    def present(self):
        """True when some live socket is open (or when that cannot be told). Never raises."""
        if self._local_sockets > 0:
            return True
        now = time.monotonic()
        if self._answer is not None and now - self._answered_at < cache_s():
            return self._answer
        answer = self._ask()
        self._answer, self._answered_at = answer, time.monotonic()
        return answer

    def _ask(self):
        try:
            client, key = self._client()
            if client is None:
                return True
            self.lookups += 1
            found = bool(client.exists(key))
        except Exception as exc:  # noqa: BLE001 — Redis down, misconfigured, anything: fail open
            if not self._failing:
                log.warning("live presence check failed (%s); pushing samples as if a viewer were present", exc)
            self._failing = True
            return True
        if self._failing:
            log.info("live presence check works again")
            self._failing = False
        return found

    # -- socket side (blocking; consumers call these from a thread) ----------------------
    def mark(self, *, opened=False):
        """A socket of this process is open: say so here at once and keep the Redis key alive.
        OPENED: a new socket (counted until `forget`). Several sockets share one SET per
        half refresh period. Never raises."""
        if opened:
            with self._lock:
                self._local_sockets += 1
        self._answer, self._answered_at = True, time.monotonic()
        now = time.monotonic()
        if now - self._marked_at < refresh_s() / 2:
            return  # the key has at least TTL - refresh/2 left
        try:
            client, key = self._client()
            if client is None:
                return
            client.set(key, "1", px=max(1, int(ttl_s() * 1000)))
            self._marked_at = now
        except Exception as exc:  # noqa: BLE001 — the socket works without it; the poller fails open
            log.warning("live presence mark failed: %s", exc)

    def forget(self):
        """A socket of this process closed. The Redis key ages out by itself (other sockets,
        here or elsewhere, may still be open); the local answer is asked again next time."""
        with self._lock:
            self._local_sockets = max(0, self._local_sockets - 1)
        self._answer = None


presence = Presence()


def viewers_present():
    return presence.present()
