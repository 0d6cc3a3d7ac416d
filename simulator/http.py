"""A minimal, careful HTTP/1.1 server on asyncio streams.

Why not uvicorn: the simulated engines must send SSE chunks on an exact schedule and
log the instant each chunk hits the socket; owning the transport (TCP_NODELAY, one
write per chunk, no middleware buffering) makes that exact and cheap, and lets one
event loop serve 150 engines for the fleet benchmark.

Supports: keep-alive, Content-Length and chunked request bodies, fixed and chunked
(streaming) responses. Handlers are `async def handler(request) -> Response | None`;
a handler that streams calls `await request.start_stream(...)` and returns None.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024


class BadRequest(Exception):
    pass


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)


def json_response(obj, status: int = 200, content_type: str = "application/json", headers=None) -> Response:
    body = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(status, body, content_type, list(headers or []))


class Request:
    def __init__(self, method: str, target: str, headers: dict[str, str], body: bytes, writer, server) -> None:
        self.method = method
        parts = urlsplit(target)
        self.path = parts.path
        self.query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        self.headers = headers
        self.body = body
        self._writer = writer
        self._server = server
        self.streaming = False

    def json(self):
        """Parsed JSON body; raises BadRequest with a readable reason."""
        try:
            return json.loads(self.body or b"null")
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(f"invalid JSON body: {exc}") from None

    async def start_stream(self, status=200, content_type="text/event-stream", headers=()) -> Stream:
        self.streaming = True
        hdrs = [("Content-Type", content_type), ("Transfer-Encoding", "chunked"), *headers]
        self._writer.write(self._server.head(status, hdrs))
        return Stream(self._writer)


class Stream:
    """Chunked-encoding writer; `send` returns False once the client has gone."""

    def __init__(self, writer) -> None:
        self._writer = writer
        self._transport = writer.transport

    @property
    def closed(self) -> bool:
        return self._transport.is_closing()

    def send(self, data: bytes) -> bool:
        if self._transport.is_closing():
            return False
        self._writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        return True

    async def drain(self) -> bool:
        # Only wait when the kernel buffer is actually full: draining after every
        # chunk would add a loop round-trip per token at 10k tokens/s.
        if self._transport.get_write_buffer_size() > 256 * 1024:
            try:
                await self._writer.drain()
            except (ConnectionError, RuntimeError):
                return False
        return not self._transport.is_closing()

    def end(self) -> None:
        if not self._transport.is_closing():
            self._writer.write(b"0\r\n\r\n")


Handler = Callable[[Request], Awaitable["Response | None"]]


class HTTPServer:
    def __init__(self, handler: Handler, *, server_header: str = "uvicorn", extra_headers=(), date_header=True) -> None:
        self.handler = handler
        self.server_header = server_header
        self.extra_headers = list(extra_headers)
        self.date_header = date_header
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.Task] = set()
        self.port = 0

    def head(self, status: int, headers) -> bytes:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
        lines = [f"HTTP/1.1 {status} {reason}"]
        if self.date_header:
            lines.append(f"date: {formatdate(usegmt=True)}")
        if self.server_header:
            lines.append(f"server: {self.server_header}")
        lines += [f"{k}: {v}" for k, v in (*self.extra_headers, *headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self._server = await asyncio.start_server(self._on_conn, host, port, reuse_address=True, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        """Stop listening and drop every open connection (the port then refuses)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._conns):
            task.cancel()
        if self._conns:
            await asyncio.gather(*self._conns, return_exceptions=True)

    async def _on_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is None:  # start_server runs each connection's callback in a task of its own
            raise RuntimeError("connection handler called outside a task")
        self._conns.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while await self._serve_one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self._conns.discard(task)
            writer.close()

    async def _serve_one(self, reader, writer) -> bool:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        try:
            method, target, version, headers = _parse_head(head)
            body = await _read_body(reader, headers)
        except BadRequest as exc:
            writer.write(
                self.head(
                    400,
                    [("Content-Type", "text/plain"), ("Content-Length", str(len(str(exc)))), ("Connection", "close")],
                )
                + str(exc).encode()
            )
            return False
        req = Request(method, target, headers, body, writer, self)
        resp = await self.handler(req)
        keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        if not req.streaming:
            resp = resp or Response(500, b"no response")
            hdrs = [("Content-Type", resp.content_type), ("Content-Length", str(len(resp.body))), *resp.headers]
            if not keep:
                hdrs.append(("Connection", "close"))
            writer.write(self.head(resp.status, hdrs) + (b"" if method == "HEAD" else resp.body))
        await writer.drain()
        return keep and not writer.transport.is_closing()


def _parse_head(head: bytes):
    try:
        text = head.decode("latin-1")
        request_line, *header_lines = text[:-4].split("\r\n")
        method, target, version = request_line.split(" ")
    except ValueError:
        raise BadRequest("malformed request line") from None
    if not version.startswith("HTTP/1."):
        raise BadRequest("unsupported HTTP version")
    headers = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest("malformed header line")
        headers[name.strip().lower()] = value.strip()
    return method, target, version, headers


async def _read_body(reader, headers) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        return await _read_chunked(reader)
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise BadRequest("bad Content-Length") from None
    if length < 0 or length > MAX_BODY:
        raise BadRequest("Content-Length out of range")
    return await reader.readexactly(length) if length else b""


async def _read_chunked(reader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";")[0].strip(), 16)
        except ValueError:
            raise BadRequest("bad chunk size") from None
        if size == 0:
            await reader.readuntil(b"\r\n")  # trailer end (no trailers supported)
            return b"".join(parts)
        total += size
        if total > MAX_BODY:
            raise BadRequest("body too large")
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)
