"""The one HTTP choke point (healthchecks' hc/lib/curl.py): every outbound request of
collectors, webhooks and benchmarks goes through here.

Two maintained clients sit under it: httpx for the synchronous calls (webhooks, the CLI) and
aiohttp for the asynchronous ones (engine polls and probes, benchmarks), because an engine
poll is nearly all a worker does and aiohttp's GET costs about half of httpx's async one
(bench/http_client.py). Callers see neither: they get a `Response` or an `HttpError`.

Timeouts are required, the body is capped while it streams in (a 10 MB junk answer
never lands in memory whole), and every failure is one typed `HttpError` whose `kind`
says what went wrong in words an operator reads on the engine card:
refused | timeout | status | too_large | bad_body | error.
"""

from __future__ import annotations

import asyncio
import errno
import json
import math
import time
import urllib.request
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn, Self
from urllib.parse import urlsplit

import httpx

if TYPE_CHECKING:
    import aiohttp

from sparkops.version import __version__

DEFAULT_MAX_BYTES = 4 * 1024 * 1024  # a busy vLLM /metrics is ~200 KB; 4 MB is generous
USER_AGENT = f"sparkops/{__version__}"  # the installed version (importlib.metadata)
# What a caller passes as `timeout=`: seconds, or an httpx.Timeout with its parts.
TimeoutArg = float | httpx.Timeout


class HttpError(Exception):
    """A failed request. `permanent` marks errors a retry will not fix (4xx, bad body)."""

    kind = "error"

    def __init__(self, message: str, *, url: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status

    @property
    def permanent(self) -> bool:
        """Read-only here so that HttpStatus can judge it from the status; kinds that are always
        permanent say so with a plain class attribute."""
        return False

    @property
    def reason(self) -> str:
        return str(self)


class Refused(HttpError):
    kind = "refused"


class Timeout(HttpError):
    kind = "timeout"


class HttpStatus(HttpError):
    kind = "status"

    @property
    def permanent(self) -> bool:  # 3xx, 4xx: the request or the URL is wrong; 5xx: the server may recover
        return self.status is not None and 300 <= self.status < 500 and self.status not in (408, 429)


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
    headers: dict[str, str]
    content: bytes
    url: str
    elapsed_s: float = 0.0
    _text: str | None = field(default=None, repr=False)

    @property
    def text(self) -> str:
        if self._text is None:
            try:
                self._text = self.content.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BadBody(f"response is not UTF-8 text (byte {exc.start})", url=self.url) from None
        return self._text

    def json(self) -> Any:  # whatever JSON the server sent: the caller reads it as its format says
        try:
            return json.loads(self.text, parse_constant=_reject_constant)
        except RecursionError:
            raise BadBody("response is a JSON bomb (nested too deeply to read)", url=self.url) from None
        except ValueError as exc:
            raise BadBody(f"response is not JSON: {str(exc)[:120]}", url=self.url) from None

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def _timeout(timeout: TimeoutArg | None) -> httpx.Timeout:
    if timeout is None:
        raise TypeError("timeout is required")
    if isinstance(timeout, httpx.Timeout):
        return timeout
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError("timeout must be a positive number of seconds")
    return httpx.Timeout(timeout)


def _translate(exc: httpx.HTTPError, url: str) -> HttpError:
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


def _total(tmo: httpx.Timeout) -> float:
    parts = [v for v in (tmo.connect, tmo.read, tmo.write, tmo.pool) if v]
    return max(parts) if parts else 30.0


def _refused(exc: BaseException | None) -> bool:
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


def _check_status(resp: Response, url: str, ok_statuses: Collection[int] | None) -> Response:
    if ok_statuses is not None and resp.status in ok_statuses:
        return resp
    if 300 <= resp.status < 400:  # never followed: an engine or receiver that redirects is misconfigured
        where = resp.headers.get("location", "")
        raise HttpStatus(
            f"HTTP {resp.status} redirect{f' to {where[:120]}' if where else ''} (not followed)",
            url=url,
            status=resp.status,
        )
    if resp.status >= 400:
        raise HttpStatus(f"HTTP {resp.status}", url=url, status=resp.status)
    return resp


def _length_guard(headers: Mapping[str, str], max_bytes: int, url: str) -> None:
    declared = headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise TooLarge(f"response too large ({int(declared)} bytes > {max_bytes})", url=url)


# --- sync -------------------------------------------------------------------------

_sync_client: httpx.Client | None = None


def sync_client() -> httpx.Client:
    """One pooled client per process (keep-alive to every engine saves a TCP handshake a poll).
    Loops that wait on a server use it too, never `httpx.get()`: that builds a client per call, and
    each client its own TLS context with the CA bundle loaded, even for http:// (about 22 ms of a
    core against 1 ms for a request on this one); the test suite's wait loops took a tenth of a whole
    run's profile there (py-spy, 5,800 of 51,683 samples)."""
    global _sync_client  # noqa: PLW0603 (one client per process, made on first use)
    if _sync_client is None:
        _sync_client = httpx.Client(
            headers={"user-agent": USER_AGENT},
            follow_redirects=False,
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
        )
    return _sync_client


def request(
    method: str,
    url: str,
    *,
    timeout: TimeoutArg,
    max_bytes: int = DEFAULT_MAX_BYTES,
    ok_statuses: Collection[int] | None = None,
    client: httpx.Client | None = None,
    **kwargs: Any,
) -> Response:
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
            chunks: list[bytes] = []
            size = 0
            for chunk in raw.iter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise TooLarge(f"response too large (over {max_bytes} bytes)", url=url)
                if time.monotonic() > deadline:
                    raise Timeout("timed out (body too slow)", url=url)
                chunks.append(chunk)
            resp = Response(
                raw.status_code,
                dict(raw.headers),
                b"".join(chunks),
                url,
                raw.elapsed.total_seconds() if _has_elapsed(raw) else 0.0,
            )
    except HttpError:
        raise
    except httpx.HTTPError as exc:
        raise _translate(exc, url) from None
    return _check_status(resp, url, ok_statuses)


def _has_elapsed(raw: httpx.Response) -> bool:
    try:
        _ = raw.elapsed  # httpx raises until the response is closed
    except RuntimeError:
        return False
    return True


def get(url: str, *, timeout: TimeoutArg, **kwargs: Any) -> Response:
    return request("GET", url, timeout=timeout, **kwargs)


def post(url: str, *, timeout: TimeoutArg, **kwargs: Any) -> Response:
    return request("POST", url, timeout=timeout, **kwargs)


# --- async (aiohttp) --------------------------------------------------------------


def _aiohttp() -> ModuleType:
    """aiohttp, imported on first use: only the async callers (a worker's polls and probes, the
    benchmarks) need it, and its import (its TLS contexts are made then) is a tenth of the start of
    every other process that imports this module: each CLI command, the web server."""
    import aiohttp

    return aiohttp


class AsyncClient:
    """An aiohttp session with the defaults every async caller wants; one per event loop.

    The session is made on first use, inside the loop that will run it (aiohttp binds a
    session to its loop). `headers` are sent with every request; POLL_HEADERS ask for no
    compression, which costs both ends more than it saves on loopback or a LAN.

    Proxies from the environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY) apply, looked up once per
    origin here rather than by aiohttp's `trust_env`, which also reads ~/.netrc on a thread for
    every request: a thread hand-off per poll."""

    def __init__(self, *, limit: int = 400, limit_per_host: int = 16, headers: Mapping[str, str] | None = None) -> None:
        self.limit, self.limit_per_host = limit, limit_per_host
        self.headers = {"user-agent": USER_AGENT, **(headers or {})}
        self._session: aiohttp.ClientSession | None = None
        self._env_proxies = urllib.request.getproxies()
        self._proxies: dict[tuple[str, str], str | None] = {}  # (scheme, host) -> proxy URL or None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            aio = _aiohttp()
            connector = aio.TCPConnector(limit=self.limit, limit_per_host=self.limit_per_host)
            self._session = aio.ClientSession(
                connector=connector, headers=self.headers, trust_env=False, auto_decompress=True, raise_for_status=False
            )
        return self._session

    def proxy_for(self, url: str) -> str | None:
        parts = urlsplit(url)
        key = (parts.scheme, parts.hostname or "")
        if key not in self._proxies:
            proxy = self._env_proxies.get(parts.scheme) or self._env_proxies.get("all")
            self._proxies[key] = None if not proxy or urllib.request.proxy_bypass(key[1]) else proxy
        return self._proxies[key]

    def request(
        self, method: str, url: str, tmo: httpx.Timeout, kwargs: dict[str, Any]
    ) -> AbstractAsyncContextManager[aiohttp.ClientResponse]:
        return self.session().request(
            method,
            url,
            timeout=_client_timeout(tmo),
            allow_redirects=False,
            proxy=self.proxy_for(url),
            **_body_kwargs(kwargs),
        )

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


POLL_HEADERS = {"accept-encoding": "identity"}


def async_client(*, headers: Mapping[str, str] | None = None, **kwargs: int) -> AsyncClient:
    """A fresh AsyncClient: `async with async_client() as c:` inside one event loop."""
    return AsyncClient(headers=headers, **kwargs)


def _client_timeout(tmo: httpx.Timeout) -> aiohttp.ClientTimeout:
    """httpx.Timeout (the type every caller passes) in aiohttp's terms; the whole exchange is
    bounded by the caller (`arequest`'s total, a benchmark's own deadline)."""
    return _aiohttp().ClientTimeout(total=None, connect=tmo.pool, sock_connect=tmo.connect, sock_read=tmo.read)


def _translate_aiohttp(exc: BaseException, url: str) -> HttpError:
    """aiohttp's exception in an operator's words. Refused, reset, cut short and timed out
    stay apart: an engine's down cause on its card depends on which it was."""
    aiohttp = _aiohttp()
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_error = exc.os_error
        if isinstance(os_error, ConnectionRefusedError) or getattr(os_error, "errno", None) == errno.ECONNREFUSED:
            return Refused("connection refused", url=url)
        return Refused(f"cannot connect: {str(os_error or exc)[:160]}", url=url)
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return Timeout("timed out (connect)", url=url)
    if isinstance(exc, aiohttp.SocketTimeoutError):
        return Timeout("timed out (read)", url=url)
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return Timeout("timed out", url=url)
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return HttpError("broken HTTP answer: server disconnected", url=url)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return HttpError(f"broken HTTP answer: body cut short ({str(exc)[:120]})", url=url)
    if isinstance(exc, aiohttp.ClientResponseError):  # a status line or header that is not HTTP
        return HttpError(f"broken HTTP answer: {(exc.message or str(exc))[:160]}", url=url)
    if isinstance(exc, aiohttp.ClientOSError):
        if getattr(exc, "errno", None) in (errno.ECONNRESET, errno.EPIPE):
            return HttpError("broken HTTP answer: connection reset", url=url)
        return HttpError(f"connection error: {str(exc)[:160]}", url=url)
    if isinstance(exc, aiohttp.InvalidURL):
        return HttpError(f"not a URL: {str(exc)[:160]}", url=url)
    return HttpError(f"{type(exc).__name__}: {str(exc)[:160]}", url=url)


def _body_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """httpx's `content=`/`json=` spelled the aiohttp way."""
    kwargs = dict(kwargs)
    if "content" in kwargs:
        kwargs["data"] = kwargs.pop("content")
    return kwargs


async def arequest(
    client: AsyncClient,
    method: str,
    url: str,
    *,
    timeout: TimeoutArg,
    max_bytes: int = DEFAULT_MAX_BYTES,
    ok_statuses: Collection[int] | None = None,
    **kwargs: Any,
) -> Response:
    """The async twin of `request`; the whole exchange is bounded by `timeout`."""
    tmo = _timeout(timeout)
    try:
        async with asyncio.timeout(_total(tmo)):
            return await _arequest(client, method, url, tmo, max_bytes, ok_statuses, kwargs)
    except TimeoutError:
        raise Timeout("timed out (total)", url=url) from None


async def _arequest(
    client: AsyncClient,
    method: str,
    url: str,
    tmo: httpx.Timeout,
    max_bytes: int,
    ok_statuses: Collection[int] | None,
    kwargs: dict[str, Any],
) -> Response:
    started = time.monotonic()
    try:
        async with client.request(method, url, tmo, kwargs) as raw:
            _length_guard(raw.headers, max_bytes, url)
            chunks: list[bytes] = []
            size = 0
            async for chunk in raw.content.iter_any():
                size += len(chunk)
                if size > max_bytes:
                    raw.close()  # a connection with an unread body must not go back to the pool
                    raise TooLarge(f"response too large (over {max_bytes} bytes)", url=url)
                chunks.append(chunk)
            headers = {k.lower(): v for k, v in raw.headers.items()}
            resp = Response(raw.status, headers, b"".join(chunks), url, time.monotonic() - started)
    except HttpError:
        raise
    except _aiohttp().ClientError as exc:
        raise _translate_aiohttp(exc, url) from None
    except ValueError as exc:  # aiohttp refuses a URL it cannot send
        raise HttpError(f"not a URL: {str(exc)[:160]}", url=url) from None
    return _check_status(resp, url, ok_statuses)


async def aget(client: AsyncClient, url: str, *, timeout: TimeoutArg, **kwargs: Any) -> Response:
    return await arequest(client, "GET", url, timeout=timeout, **kwargs)


async def apost(client: AsyncClient, url: str, *, timeout: TimeoutArg, **kwargs: Any) -> Response:
    return await arequest(client, "POST", url, timeout=timeout, **kwargs)


class StreamedResponse:
    """What `astream` yields: the status, the headers and the body as it arrives."""

    def __init__(self, raw: aiohttp.ClientResponse, url: str) -> None:
        self._raw, self.url = raw, url
        self.status_code, self.headers = raw.status, raw.headers
        self._content: bytes | None = None

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body as the server sent it: one piece per HTTP chunk (an SSE engine flushes one
        event per chunk), so a benchmark times each event even when several arrive at once."""
        try:
            async for chunk, _ in self._raw.content.iter_chunks():
                yield chunk
        except _aiohttp().ClientError as exc:
            raise _translate_aiohttp(exc, self.url) from None

    async def aread(self) -> bytes:
        if self._content is None:
            self._content = b"".join([chunk async for chunk in self.aiter_bytes()])
        return self._content

    @property
    def text(self) -> str:
        return (self._content or b"").decode("utf-8", "replace")


@asynccontextmanager
async def astream(
    client: AsyncClient,
    method: str,
    url: str,
    *,
    timeout: TimeoutArg,
    ok_statuses: Collection[int] | None = None,
    **kwargs: Any,
) -> AsyncIterator[StreamedResponse]:
    """Yield a `StreamedResponse` for reading as it arrives (SSE benchmarks). The status is
    checked before the body is read; the caller bounds what it reads and for how long."""
    tmo = _timeout(timeout)
    try:
        async with client.request(method, url, tmo, kwargs) as raw:
            resp = StreamedResponse(raw, url)
            if raw.status >= 400 and not (ok_statuses and raw.status in ok_statuses):
                await resp.aread()
                raise HttpStatus(f"HTTP {raw.status}: {resp.text[:300]}", url=url, status=raw.status)
            yield resp
    except HttpError:
        raise
    except _aiohttp().ClientError as exc:
        raise _translate_aiohttp(exc, url) from None
