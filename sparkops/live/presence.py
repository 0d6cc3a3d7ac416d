"""Viewer presence: is a live WebSocket open anywhere? The sample pushes ask before they render.

Rendering every card and sending it to groups nobody listens to was most of the watcher's
CPU with no browser open. So each open socket (consumers.py) keeps one Redis key alive —
`<channel prefix>:live:viewers`, TTL `SPARKOPS_LIVE_PRESENCE_TTL` (60 s), set on connect and
refreshed every TTL/3 while the socket is open — and the publishing side (the poller's
receivers) reads it at most once per `SPARKOPS_LIVE_PRESENCE_CACHE` (2 s) per process.

- A page that opens a socket gets samples again within one poll interval plus the cache.
- A socket of THIS process answers "present" at once (tests, a single-process stack).
- After the last socket closes, pushes stop once the key expires (TTL) and the cache ages.
The socket side (`sockets`) is one per process, as the sockets are; the publishing side
(`Viewers`) belongs to its publisher, with its own cache.
- Redis unreachable, or a channel layer that is not Redis: "present" (fail open: losing
  pushes because the check failed is worse than rendering a card for nobody). Nothing here
  raises into a poll.

Only the frequent, droppable samples are gated ("engine.sample", "host.sample"); alert and
change-log events always go out."""

import logging
import threading
import time
from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    import redis

log = logging.getLogger(__name__)

DEFAULT_TTL_S = 60.0
DEFAULT_CACHE_S = 2.0
# Short: the check runs in the poll thread, and a socket's connect waits for its mark.
REDIS_TIMEOUT_S = 0.25


def ttl_s() -> float:
    return float(getattr(settings, "SPARKOPS_LIVE_PRESENCE_TTL", DEFAULT_TTL_S))


def refresh_s() -> float:
    """How often an open socket refreshes the key: three chances before it expires."""
    return ttl_s() / 3


def cache_s() -> float:
    return float(getattr(settings, "SPARKOPS_LIVE_PRESENCE_CACHE", DEFAULT_CACHE_S))


def _redis_target() -> tuple[str, str] | None:
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


class _Redis:
    """The Redis client of the channel layer's server (thread-safe pool; redis-py re-pools after
    a fork) and the presence key, or (None, None) when the layer is not Redis."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[str, redis.Redis] = {}  # redis URL -> client

    def __call__(self) -> tuple["redis.Redis", str] | tuple[None, None]:
        target = _redis_target()
        if target is None:
            return None, None
        url, prefix = target
        client = self._clients.get(url)
        if client is None:
            import redis

            with self._lock:
                client = self._clients.get(url) or redis.Redis.from_url(
                    url, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S
                )
                self._clients[url] = client
        return client, f"{prefix}:live:viewers"


class Sockets:
    """The live sockets of this process (consumers.py): `mark()` when one opens and while it
    stays open, `forget()` when it closes. One per process (`sockets`), as the sockets are."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._client = _Redis()
        self.local = 0  # sockets open in this process
        self._marked_at = float("-inf")  # last successful SET by this process

    def mark(self, *, opened: bool = False) -> None:
        """A socket of this process is open: keep the Redis key alive. OPENED: a new socket
        (counted until `forget`). Several sockets share one SET per half refresh period.
        Blocking (consumers call it from a thread); never raises."""
        if opened:
            with self._lock:
                self.local += 1
        now = time.monotonic()
        if now - self._marked_at < refresh_s() / 2:
            return  # the key has at least TTL - refresh/2 left
        try:
            client, key = self._client()
            if client is None or key is None:  # both or neither
                return
            client.set(key, "1", px=max(1, int(ttl_s() * 1000)))
            self._marked_at = now
        except Exception as exc:  # the socket works without it; the poller fails open
            log.warning("live presence mark failed: %s", exc)

    def forget(self) -> None:
        """A socket of this process closed. The Redis key ages out by itself (other sockets,
        here or elsewhere, may still be open)."""
        with self._lock:
            self.local = max(0, self.local - 1)


sockets = Sockets()


class Viewers:
    """Whether a live socket is open anywhere, for a publisher (`LivePublisher` owns one): the
    Redis key, asked at most every `cache_s()`; a socket of this process answers at once (tests,
    a single-process stack). Redis unreachable, or a layer that is not Redis: "present"."""

    def __init__(self) -> None:
        self._client = _Redis()
        self._answer: bool | None = None
        self._answered_at = 0.0
        self._failing = False
        self.lookups = 0  # Redis reads made: what the no-viewer case costs

    def present(self) -> bool:
        """True when some live socket is open (or when that cannot be told). Never raises."""
        if sockets.local > 0:
            return True
        now = time.monotonic()
        if self._answer is not None and now - self._answered_at < cache_s():
            return self._answer
        answer = self._ask()
        self._answer, self._answered_at = answer, time.monotonic()
        return answer

    def _ask(self) -> bool:
        try:
            client, key = self._client()
            if client is None or key is None:  # both or neither
                return True
            self.lookups += 1
            found = bool(client.exists(key))
        except Exception as exc:  # Redis down, misconfigured, anything: fail open
            if not self._failing:
                log.warning("live presence check failed (%s); pushing samples as if a viewer were present", exc)
            self._failing = True
            return True
        if self._failing:
            log.info("live presence check works again")
            self._failing = False
        return found


def presence_key() -> tuple["redis.Redis", str] | tuple[None, None]:
    """(Redis client, key) of the presence key, (None, None) without a Redis layer (tests)."""
    return _Redis()()
