"""The one HTTP choke point (healthchecks' hc/lib/curl.py): every outbound request of
collectors, webhooks and benchmarks goes through here.

Timeouts are required, the body is capped while it streams in (a 10 MB junk answer
never lands in memory whole), and every failure is one typed `HttpError` whose `kind`
says what went wrong in words an operator reads on the engine card:
refused | timeout | status | too_large | bad_body | error.
"""
from __future__ import annotations

import asyncio
import functools
import json
import math
import time
import urllib.request
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field

import logging

import httpx

from dashboard.http_h11 import H11Transport

# httpx logs every request at INFO: at one probe a second per engine that is most of a
# worker's log volume and a measurable share of its CPU.
logging.getLogger("httpx").setLevel(logging.WARNING)

DEFAULT_MAX_BYTES = 4 * 1024 * 1024  # a busy vLLM /metrics is ~200 KB; 4 MB is generous
USER_AGENT = "sparkops/0.1"


class HttpError(Exception):
    """A failed request. `permanent` marks errors a retry will not fix (4xx, bad body)."""

    kind = "error"
    permanent = False

    def __init__(self, message, *, url="", status=None):
        super().__init__(message)
        self.url = url
        self.status = status

    @property
    def reason(self):
        return str(self)


class Refused(HttpError):
    kind = "refused"


class Timeout(HttpError):
    kind = "timeout"


class HttpStatus(HttpError):
    kind = "status"

    @property
    def permanent(self):  # 4xx: the request is wrong, 5xx: the server may recover
        return self.status is not None and 400 <= self.status < 500 and self.status not in (408, 429)


class TooLarge(HttpError):
    kind = "too_large"
    permanent = True


class BadBody(HttpError):
    """The body is not what was asked for: not UTF-8, not JSON, not Prometheus text."""

    kind = "bad_body"
    permanent = True


@dataclass
class Response:
    status: int
    headers: dict
    content: bytes
    url: str
    elapsed_s: float = 0.0
    _text: str | None = field(default=None, repr=False)

    @property
    def text(self):
        if self._text is None:
            try:
                self._text = self.content.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BadBody(f"response is not UTF-8 text (byte {exc.start})", url=self.url) from None
        return self._text

    def json(self):
        try:
            return json.loads(self.text, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            raise BadBody(f"response is not JSON: {str(exc)[:120]}", url=self.url) from None

    @property
    def content_type(self):
        return self.headers.get("content-type", "")


def _reject_constant(name):
    raise ValueError(f"{name} is not valid JSON")


def _timeout(timeout):
    if timeout is None:
        raise TypeError("timeout is required")
    if isinstance(timeout, httpx.Timeout):
        return timeout
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError("timeout must be a positive number of seconds")
    return httpx.Timeout(timeout)


def _translate(exc, url):
    if isinstance(exc, httpx.ConnectError):
        text = str(exc) or "connection failed"
        if _refused(exc) or "refused" in text.lower() or "errno 111" in text.lower():
            return Refused("connection refused", url=url)
        return Refused(f"cannot connect: {text[:160]}", url=url)
    if isinstance(exc, httpx.TimeoutException):
        return Timeout(f"timed out ({type(exc).__name__.replace('Timeout', '').lower() or 'total'})", url=url)
    if isinstance(exc, httpx.RemoteProtocolError):
        return HttpError(f"broken HTTP answer: {str(exc)[:160]}", url=url)
    return HttpError(f"{type(exc).__name__}: {str(exc)[:160]}", url=url)


def _total(tmo):
    parts = [v for v in (tmo.connect, tmo.read, tmo.write, tmo.pool) if v]
    return max(parts) if parts else 30.0


def _refused(exc):
    """anyio hides the errno behind "All connection attempts failed": walk the chain."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, ConnectionRefusedError):
            return True
        if isinstance(exc, OSError) and exc.errno == 111:
            return True
        for inner in getattr(exc, "exceptions", ()) or ():  # ExceptionGroup from happy eyeballs
            if _refused(inner):
                return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _check_status(resp, url, ok_statuses):
    if ok_statuses is not None and resp.status in ok_statuses:
        return resp
    if resp.status >= 400:
        raise HttpStatus(f"HTTP {resp.status}", url=url, status=resp.status)
    return resp


def _length_guard(headers, max_bytes, url):
    declared = headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise TooLarge(f"response too large ({int(declared)} bytes > {max_bytes})", url=url)


# --- sync -------------------------------------------------------------------------

_sync_client = None


def sync_client():
    """One pooled client per process (keep-alive to every engine saves a TCP handshake a poll)."""
    global _sync_client
    if _sync_client is None:
        _sync_client = httpx.Client(headers={"user-agent": USER_AGENT}, follow_redirects=False,
                                    limits=httpx.Limits(max_connections=200, max_keepalive_connections=50))
    return _sync_client


def request(method, url, *, timeout, max_bytes=DEFAULT_MAX_BYTES, ok_statuses=None, client=None, **kwargs):
    """Send one request; return a `Response` or raise an `HttpError`.

    `timeout` bounds every socket wait and (roughly, checked per chunk) the whole answer,
    so a server that drips one byte a second cannot hold a poll.
    `ok_statuses`: statuses that are answers, not errors (e.g. {503} for a health probe)."""
    tmo = _timeout(timeout)
    deadline = time.monotonic() + _total(tmo)
    client = client or sync_client()
    try:
        with client.stream(method, url, timeout=tmo, **kwargs) as raw:
            _length_guard(raw.headers, max_bytes, url)
            chunks, size = [], 0
            for chunk in raw.iter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise TooLarge(f"response too large (over {max_bytes} bytes)", url=url)
                if time.monotonic() > deadline:
                    raise Timeout("timed out (body too slow)", url=url)
                chunks.append(chunk)
            resp = Response(raw.status_code, dict(raw.headers), b"".join(chunks), url,
                            raw.elapsed.total_seconds() if _has_elapsed(raw) else 0.0)
    except HttpError:
        raise
    except httpx.HTTPError as exc:
        raise _translate(exc, url) from None
    return _check_status(resp, url, ok_statuses)


def _has_elapsed(raw):
    try:
        raw.elapsed
    except RuntimeError:
        return False
    return True


def get(url, *, timeout, **kwargs):
    return request("GET", url, timeout=timeout, **kwargs)


def post(url, *, timeout, **kwargs):
    return request("POST", url, timeout=timeout, **kwargs)


@contextmanager
def stream(method, url, *, timeout, client=None, ok_statuses=None, **kwargs):
    """Yield the raw httpx response for line-by-line reading (SSE benchmarks).

    Status is checked before the body is read; the caller bounds what it reads."""
    tmo = _timeout(timeout)
    client = client or sync_client()
    try:
        with client.stream(method, url, timeout=tmo, **kwargs) as raw:
            if raw.status_code >= 400 and not (ok_statuses and raw.status_code in ok_statuses):
                raw.read()
                raise HttpStatus(f"HTTP {raw.status_code}: {raw.text[:300]}", url=url, status=raw.status_code)
            yield raw
    except HttpError:
        raise
    except httpx.HTTPError as exc:
        raise _translate(exc, url) from None


# --- async ------------------------------------------------------------------------

def async_client(*, limits=None, **kwargs):
    """A fresh AsyncClient; use it as `async with async_client() as c:` inside one event loop."""
    limits = limits or httpx.Limits(max_connections=400, max_keepalive_connections=100)
    return httpx.AsyncClient(headers={"user-agent": USER_AGENT}, follow_redirects=False, limits=limits, **kwargs)


@functools.lru_cache(maxsize=1)
def _shared_tls():
    return httpx.create_ssl_context()


class OriginClients:
    """One AsyncClient per origin behind the `stream()`/`aclose()` the helpers here use.

    httpcore matches each request against every pooled connection, so one client for a fleet
    (150 engines, 450 kept connections) spent most of a poll cycle in that matching; a pool
    per engine keeps it to a handful. A plain GET to a plain-http origin (every poll and probe)
    goes straight to its H11Transport: the Client layer (auth, redirects, cookies, hooks) it
    would pass through does nothing for it and cost as much CPU as the exchange."""

    def __init__(self):
        self._clients, self._direct = {}, {}
        self._urls = {}  # url -> its parsed httpx.URL: a poll asks for the same few URLs for ever
        self._proxies = urllib.request.getproxies()

    def _url(self, url):
        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) >= 4096:
                self._urls.clear()
            parsed = self._urls[url] = httpx.URL(url)
        return parsed

    def _for(self, url):
        parsed = self._url(url)
        key = (parsed.scheme, parsed.host, parsed.port)
        client = self._clients.get(key)
        if client is None:
            if parsed.scheme == "http" and not self._proxied(parsed.host):
                # Under half the CPU a GET of httpcore's transport (bench/http_client.py).
                transport = H11Transport(max_keepalive=8)
                client = async_client(transport=transport)
                self._direct[client] = transport
            else:
                # One TLS context for all: building one per client costs more than a poll.
                client = async_client(verify=_shared_tls(),
                                      limits=httpx.Limits(max_connections=16, max_keepalive_connections=8))
            self._clients[key] = client
        return client

    def _proxied(self, host):
        """Whether HTTP_PROXY/ALL_PROXY applies to `host`: httpx honours them only on its own
        transport, so such an origin keeps it."""
        return bool({"http", "all"} & self._proxies.keys()) and not urllib.request.proxy_bypass(host)

    def stream(self, method, url, *, timeout, **kwargs):
        client = self._for(url)
        transport = self._direct.get(client)
        if transport is not None and method == "GET" and not kwargs:
            return _direct_get(transport, self._url(url), timeout)
        return client.stream(method, url, timeout=timeout, **kwargs)

    async def aclose(self):
        clients, self._clients, self._direct = list(self._clients.values()), {}, {}
        await asyncio.gather(*(c.aclose() for c in clients))


_DIRECT_HEADERS = [(b"user-agent", USER_AGENT.encode()), (b"accept", b"*/*"),
                   # Loopback and LAN: compressing a /metrics costs both ends more than sending it.
                   (b"accept-encoding", b"identity")]


@asynccontextmanager
async def _direct_get(transport, url, timeout):
    request = httpx.Request("GET", url, headers=_DIRECT_HEADERS, extensions={"timeout": timeout.as_dict()})
    response = await transport.handle_async_request(request)
    response.request = request
    try:
        yield response
    finally:
        await response.aclose()


async def arequest(client, method, url, *, timeout, max_bytes=DEFAULT_MAX_BYTES, ok_statuses=None, **kwargs):
    """The async twin of `request`; the whole exchange is bounded by `timeout`."""
    tmo = _timeout(timeout)
    try:
        async with asyncio.timeout(_total(tmo)):
            return await _arequest(client, method, url, tmo, max_bytes, ok_statuses, kwargs)
    except TimeoutError:
        raise Timeout("timed out (total)", url=url) from None


async def _arequest(client, method, url, tmo, max_bytes, ok_statuses, kwargs):
    try:
        async with client.stream(method, url, timeout=tmo, **kwargs) as raw:
            _length_guard(raw.headers, max_bytes, url)
            chunks, size = [], 0
            async for chunk in raw.aiter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise TooLarge(f"response too large (over {max_bytes} bytes)", url=url)
                chunks.append(chunk)
            resp = Response(raw.status_code, dict(raw.headers), b"".join(chunks), url)
    except HttpError:
        raise
    except httpx.HTTPError as exc:
        raise _translate(exc, url) from None
    return _check_status(resp, url, ok_statuses)


async def aget(client, url, *, timeout, **kwargs):
    return await arequest(client, "GET", url, timeout=timeout, **kwargs)


async def apost(client, url, *, timeout, **kwargs):
    return await arequest(client, "POST", url, timeout=timeout, **kwargs)


@asynccontextmanager
async def astream(client, method, url, *, timeout, ok_statuses=None, **kwargs):
    tmo = _timeout(timeout)
    try:
        async with client.stream(method, url, timeout=tmo, **kwargs) as raw:
            if raw.status_code >= 400 and not (ok_statuses and raw.status_code in ok_statuses):
                await raw.aread()
                raise HttpStatus(f"HTTP {raw.status_code}: {raw.text[:300]}", url=url, status=raw.status_code)
            yield raw
    except HttpError:
        raise
    except httpx.HTTPError as exc:
        raise _translate(exc, url) from None
