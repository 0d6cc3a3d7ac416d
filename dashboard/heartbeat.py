"""A heartbeat for the watcher itself. The box SparkOps watches is the box it runs on: when the
box dies, nothing on it can say so. So the fleet's leading worker pings an outside checker
(Healthchecks, Uptime Kuma's push monitor, …) every SPARKOPS_HEARTBEAT_INTERVAL_S while the
stack is healthy, and sends the failure URL (`<url>/fail` by default) when /healthz would say
503; the checker pages when the pings stop or turn to failures.

It is one of the leader's resident duties (dashboard/schedule.py). The verdict is read in the
duty (a few queries and a Redis PING); the HTTP request itself runs on a thread of its own, so a
slow checker never delays a poll, and a ping still in flight makes the next one wait its turn."""

import json
import logging
import threading
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

from dashboard import http
from dashboard.healthcheck import health_report

log = logging.getLogger(__name__)
TIMEOUT_S = 10.0
MAX_BODY = 10_000  # Healthchecks keeps the first 10 kB of a ping's body


def fail_url(url: str) -> str:
    """Healthchecks' failure endpoint: `/fail` after the path, before any query."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/fail"))


def duties() -> dict[str, tuple[float, "Heartbeat"]]:
    """The resident duty, {"heartbeat": (interval, Heartbeat)}, or {} without SPARKOPS_HEARTBEAT_URL."""
    if not settings.SPARKOPS_HEARTBEAT_URL:
        return {}
    return {"heartbeat": (settings.SPARKOPS_HEARTBEAT_INTERVAL_S, Heartbeat.from_settings())}


class Heartbeat:
    def __init__(self, url: str, *, fail: str | None = None, method: str = "GET", timeout: float = TIMEOUT_S) -> None:
        self.url, self.fail = url, fail or fail_url(url)
        self.method, self.timeout = method, timeout
        self._inflight: threading.Thread | None = None
        self._lock = threading.Lock()
        # (url, status or error) of the latest finished ping, for tests and logs
        self.last: tuple[str, int | str] | None = None

    @classmethod
    def from_settings(cls) -> "Heartbeat":
        return cls(
            settings.SPARKOPS_HEARTBEAT_URL,
            fail=settings.SPARKOPS_HEARTBEAT_FAIL_URL or None,
            method=settings.SPARKOPS_HEARTBEAT_METHOD,
        )

    def __call__(self) -> str | None:
        """The duty: judge the stack as /healthz does, then ping (or /fail) in the background."""
        report = health_report()
        healthy = report["status"] == "ok"
        target = self.url if healthy else self.fail
        body = json.dumps(
            {"status": report["status"], "problems": report["problems"], "host": settings.SPARKOPS_HOST_NAME},
            separators=(",", ":"),
        )[:MAX_BODY]
        with self._lock:
            if self._inflight is not None and self._inflight.is_alive():
                log.warning("heartbeat: the previous ping to %s is still waiting; this one is skipped", _shown(target))
                return None
            self._inflight = threading.Thread(
                target=self._send, args=(target, body, healthy), name="sparkops-heartbeat", daemon=True
            )
            self._inflight.start()
        return target

    def join(self, timeout: float | None = None) -> None:
        thread = self._inflight
        if thread is not None:
            thread.join(timeout)

    def _send(self, target: str, body: str, healthy: bool) -> None:
        try:
            if self.method == "POST":
                response = http.post(
                    target,
                    timeout=self.timeout,
                    content=body.encode(),
                    headers={"Content-Type": "application/json"},
                    max_bytes=64 * 1024,
                )
            else:
                response = http.get(target, timeout=self.timeout, max_bytes=64 * 1024)
            self.last = (target, response.status)
            if not healthy:
                log.warning("heartbeat: told %s the stack is unhealthy: %s", _shown(target), body)
        except http.HttpError as exc:
            self.last = (target, str(exc))
            log.warning("heartbeat: ping to %s failed: %s", _shown(target), exc)
        except Exception as exc:  # never a crash of a thread nobody watches
            self.last = (target, repr(exc))
            log.exception("heartbeat: ping to %s failed", _shown(target))


def _shown(url: str) -> str:
    """The URL without its path (a Healthchecks URL's path is its secret)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/…"
