"""A plain-HTTP/1.1 httpx transport on h11 and asyncio streams, for the engine polls.

The resident poller sends a dozen GETs every two seconds to engines on loopback or the LAN.
httpx's default transport (httpcore over anyio) spends two to three times this one's CPU
on each (bench/http_client.py: ~0.5 against ~0.2 ms for a /health), and for a poller whose
budget is under 1 % of a core the transport was the largest share. httpx's Client layer
(timeouts, headers, streaming) stays; only the wire under it changes. https and proxied
origins keep the default transport (`http.OriginClients._for`).

Errors are the httpx exceptions the default transport raises for the same failure, so
`http._translate` words them the same on the engine card.
"""
from __future__ import annotations

import asyncio

import h11
import httpx

READ_SIZE = 64 * 1024
RETRYABLE = frozenset({"GET", "HEAD", "OPTIONS"})


class _Conn:
    __slots__ = ("reader", "writer", "h11", "reused", "received")

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.h11 = h11.Connection(h11.CLIENT)
        self.reused = self.received = False

    def idle_usable(self):
        """The peer closed it, or sent bytes nobody asked for (a 408 before closing): the
        next answer read from it would not be ours. httpcore's `is_readable` check."""
        return not (self.reader.at_eof() or self.reader._buffer or self.writer.transport.is_closing())

    def close(self):
        self.writer.close()

    async def receive(self, timeout):
        try:
            async with asyncio.timeout(timeout):
                data = await self.reader.read(READ_SIZE)
        except TimeoutError:
            raise httpx.ReadTimeout("timed out") from None
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__) from exc
        self.received = self.received or bool(data)
        self.h11.receive_data(data)
        return data

    def next_event(self):
        try:
            return self.h11.next_event()
        except h11.RemoteProtocolError as exc:
            raise httpx.RemoteProtocolError(str(exc)) from exc


class _Body(httpx.AsyncByteStream):
    """Chunks as they arrive; the connection goes back to the pool only once the whole
    answer was read and both sides may go on (no `Connection: close`)."""

    def __init__(self, pool, key, conn, timeout):
        self._pool, self._key, self._conn, self._timeout = pool, key, conn, timeout
        self._done = False

    async def __aiter__(self):
        conn = self._conn
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                await conn.receive(self._timeout)
            elif type(event) is h11.Data:
                yield bytes(event.data)
            elif type(event) is h11.EndOfMessage:
                self._done = True
                return

    async def aclose(self):
        conn, self._conn = self._conn, None
        if conn is None:
            return
        state = conn.h11
        if self._done and state.our_state is h11.DONE and state.their_state is h11.DONE:
            state.start_next_cycle()
            self._pool._checkin(self._key, conn)
        else:
            conn.close()


class H11Transport(httpx.AsyncBaseTransport):
    """http:// only; a LIFO keep-alive pool per (host, port), at most `max_keepalive` idle.

    A reused connection that fails before any answer byte (the server dropped it while we
    sent) is retried once on a fresh one, for GET/HEAD/OPTIONS only."""

    def __init__(self, max_keepalive=8):
        self.max_keepalive = max_keepalive
        self._idle = {}
        self._closed = False

    async def handle_async_request(self, request):
        url = request.url
        if url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"H11Transport speaks plain http, not {url.scheme!r}")
        timeouts = request.extensions.get("timeout", {})
        key = (url.host, url.port or 80)
        conn = self._checkout(key)
        while True:
            if conn is None:
                conn = await self._connect(key, timeouts.get("connect"))
            try:
                head = await self._exchange(conn, request, timeouts)
                break
            except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError):
                conn.close()
                if not conn.reused or conn.received or request.method not in RETRYABLE:
                    raise
                conn = None
            except BaseException:
                conn.close()
                raise
        return httpx.Response(
            head.status_code, headers=head.headers.raw_items(),
            stream=_Body(self, key, conn, timeouts.get("read")),
            extensions={"http_version": b"HTTP/" + head.http_version, "reason_phrase": head.reason})

    async def _exchange(self, conn, request, timeouts):
        state, url = conn.h11, request.url
        headers = request.headers.raw
        if "host" not in request.headers:
            headers = [(b"Host", url.netloc), *headers]
        try:
            self._write(conn, state.send(h11.Request(method=request.method, target=url.raw_path, headers=headers)))
            async for chunk in request.stream:
                self._write(conn, state.send(h11.Data(data=chunk)))
                await self._drain(conn, timeouts.get("write"))
            self._write(conn, state.send(h11.EndOfMessage()))
        except h11.LocalProtocolError as exc:
            raise httpx.LocalProtocolError(str(exc)) from exc
        await self._drain(conn, timeouts.get("write"))
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                if not await conn.receive(timeouts.get("read")) and state.their_state is h11.SEND_RESPONSE:
                    raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
            elif type(event) is h11.Response:
                return event

    @staticmethod
    def _write(conn, data):
        if data:
            conn.writer.write(data)

    @staticmethod
    async def _drain(conn, timeout):
        if not conn.writer.transport.get_write_buffer_size():
            return  # the kernel took it all; a lost connection shows on the read that follows
        try:
            async with asyncio.timeout(timeout):
                await conn.writer.drain()
        except TimeoutError:
            raise httpx.WriteTimeout("timed out") from None
        except OSError as exc:
            raise httpx.WriteError(str(exc) or type(exc).__name__) from exc

    async def _connect(self, key, timeout):
        try:
            async with asyncio.timeout(timeout):
                return _Conn(*await asyncio.open_connection(*key))
        except TimeoutError:
            raise httpx.ConnectTimeout("timed out") from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc)) from exc

    def _checkout(self, key):
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.idle_usable():
                conn.reused = True
                conn.received = False
                return conn
            conn.close()
        return None

    def _checkin(self, key, conn):
        idle = self._idle.setdefault(key, [])
        if self._closed or len(idle) >= self.max_keepalive:
            conn.close()
        else:
            idle.append(conn)

    async def aclose(self):
        self._closed = True
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()
