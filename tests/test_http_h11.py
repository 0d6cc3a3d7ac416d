"""The h11 transport under `http.OriginClients`, against real servers on 127.0.0.1: the
answers, the keep-alive pool, and every failure worded as httpx's own transport would."""
import asyncio
import time

import httpx
import pytest

from dashboard import http
from dashboard.http_h11 import H11Transport
from dashboard.simulator.fleet import serve_many


def answer(status=200, body=b"", headers=()):
    head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class Server:
    """A loopback HTTP/1.1 server that counts connections; `respond(n, head, body, writer)`
    answers the n-th request (from 0) on the wire itself and returns False to hang up."""

    def __init__(self, respond):
        self.respond, self.connections, self.requests, self.closed = respond, 0, [], 0

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def _serve(self, reader, writer):
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                body = await reader.readexactly(length)
                self.requests.append((head, body))
                if await self.respond(len(self.requests) - 1, head, body, writer) is False:
                    break
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed += 1
            writer.close()


def static(status=200, body=b"ok", headers=()):
    async def respond(n, head, body_in, writer):
        writer.write(answer(status, body, headers))
    return respond


def transport(clients, url):
    return clients._for(url)._transport


async def test_a_simulated_vllm_engine_answers_as_through_httpx():
    fleet = await serve_many(1, "vllm")
    base, clients = fleet.urls[0], http.OriginClients()
    try:
        assert isinstance(transport(clients, base), H11Transport)
        async with http.async_client() as reference:
            for path in ("/health", "/v1/models"):
                ours = await http.aget(clients, base + path, timeout=2)
                theirs = await http.aget(reference, base + path, timeout=2)
                assert ours.status == theirs.status == 200 and len(ours.content) == len(theirs.content)
                assert ours.headers.keys() == theirs.headers.keys()
        assert [m["id"] for m in ours.json()["data"]] == ["Qwen/Qwen3-8B"]
        metrics = await http.aget(clients, base + "/metrics", timeout=2)
        assert metrics.status == 200 and "vllm:num_requests_running" in metrics.text
        assert int(metrics.headers["content-length"]) == len(metrics.content) > 1000
    finally:
        await clients.aclose()
        await fleet.close()


async def test_status_headers_body_and_post():
    async def respond(n, head, body, writer):
        writer.write(answer(201, b"got " + body + b" " + head.split(b" ")[1], ["X-Thing: Yes", "Set-Cookie: a=b"]))

    async with Server(respond) as server:
        clients = http.OriginClients()
        resp = await http.apost(clients, server.url + "/a/b?x=1&y=%20", timeout=2, content=b"payload")
        assert resp.status == 201 and resp.content == b"got payload /a/b?x=1&y=%20"
        assert resp.headers["x-thing"] == "Yes"
        head = server.requests[0][0].lower()
        assert head.startswith(b"post /a/b?x=1&y=%20 http/1.1\r\n")
        assert b"\r\nhost: 127.0.0.1:" in head and b"\r\nuser-agent: sparkops/0.1\r\n" in head
        await clients.aclose()


async def test_sequential_gets_share_one_connection():
    async with Server(static()) as server:
        clients = http.OriginClients()
        for _ in range(5):
            assert (await http.aget(clients, server.url + "/", timeout=2)).content == b"ok"
        assert server.connections == 1 and len(server.requests) == 5
        await clients.aclose()
        await asyncio.sleep(0.05)
        assert server.closed == 1  # aclose closes the pooled connection


async def test_a_connection_the_server_closed_while_idle_is_not_used():
    """Checked at checkout, not by a retry: a POST is never retried."""
    async def respond(n, head, body, writer):
        writer.write(answer(body=b"ok"))
        return False  # answer, then hang up: the pooled connection is dead

    async with Server(respond) as server:
        clients = http.OriginClients()
        for _ in range(3):
            assert (await http.apost(clients, server.url + "/", timeout=2, content=b"x")).content == b"ok"
            await asyncio.sleep(0.05)
        assert server.connections == 3
        await clients.aclose()


async def test_a_reused_connection_dropped_as_the_request_arrives_is_retried_once():
    """The race a pool cannot see: the server closes a kept connection just as the request
    is sent. Nothing of the answer arrived, so a fresh connection is safe."""
    async def respond(n, head, body, writer):
        if n == 1:
            return False  # the second request, on the kept connection: hang up without a byte
        writer.write(answer(body=b"ok%d" % n))

    async with Server(respond) as server:
        clients = http.OriginClients()
        assert (await http.aget(clients, server.url + "/", timeout=2)).content == b"ok0"
        assert (await http.aget(clients, server.url + "/", timeout=2)).content == b"ok2"
        assert server.connections == 2 and len(server.requests) == 3
        await clients.aclose()


async def test_a_reused_connection_dropped_mid_answer_is_not_retried():
    async def respond(n, head, body, writer):
        if n == 1:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Le")
            return False
        writer.write(answer(body=b"ok%d" % n))

    async with Server(respond) as server:
        clients = http.OriginClients()
        assert (await http.aget(clients, server.url + "/", timeout=2)).content == b"ok0"
        with pytest.raises(http.HttpError) as err:
            await http.aget(clients, server.url + "/", timeout=2)
        assert err.value.reason.startswith("broken HTTP answer"), err.value.reason
        assert len(server.requests) == 2
        await clients.aclose()


async def test_a_fresh_connection_dropped_without_an_answer_is_not_retried():
    async def respond(n, head, body, writer):
        return False

    async with Server(respond) as server:
        clients = http.OriginClients()
        with pytest.raises(http.HttpError) as err:
            await http.aget(clients, server.url + "/", timeout=2)
        assert err.value.reason == "broken HTTP answer: Server disconnected without sending a response."
        assert server.connections == 1
        await clients.aclose()


async def test_connection_refused():
    async with Server(static()) as server:
        url = server.url
    await asyncio.sleep(0.05)
    clients = http.OriginClients()
    with pytest.raises(http.Refused) as err:
        await http.aget(clients, url + "/health", timeout=2)
    assert err.value.reason == "connection refused"
    await clients.aclose()


@pytest.mark.parametrize("timeout, reason", [(0.3, "timed out"), (httpx.Timeout(5, read=0.2), "timed out (read)")])
async def test_a_server_that_never_answers_times_out(timeout, reason):
    async def respond(n, head, body, writer):
        await asyncio.sleep(10)

    async with Server(respond) as server:
        clients = http.OriginClients()
        started = time.monotonic()
        with pytest.raises(http.Timeout) as err:
            await http.aget(clients, server.url + "/", timeout=timeout)
        assert time.monotonic() - started < 0.8 and err.value.reason.startswith(reason)
        assert not transport(clients, server.url)._idle.get(("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
        await clients.aclose()


async def test_a_truncated_body_is_a_broken_answer():
    async def respond(n, head, body, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 10)
        return False

    async with Server(respond) as server:
        clients = http.OriginClients()
        with pytest.raises(http.HttpError) as err:
            await http.aget(clients, server.url + "/", timeout=2)
        assert err.value.reason.startswith(
            "broken HTTP answer: peer closed connection without sending complete message body")
        assert len(server.requests) == 1  # answer bytes arrived: no retry
        await clients.aclose()


@pytest.mark.parametrize("declared", [True, False])
async def test_too_large_answers_stop_and_the_connection_is_not_reused(declared):
    async def respond(n, head, body, writer):
        if n > 0:
            writer.write(answer(body=b"small"))
            return
        writer.write(b"HTTP/1.1 200 OK\r\n" + (b"Content-Length: 10485760\r\n\r\n" if declared else b"\r\n"))
        for _ in range(160):
            writer.write(b"x" * 65536)
            await writer.drain()
        return declared

    async with Server(respond) as server:
        clients = http.OriginClients()
        with pytest.raises(http.TooLarge):
            await http.aget(clients, server.url + "/", timeout=5, max_bytes=1024 * 1024)
        assert (await http.aget(clients, server.url + "/", timeout=5)).content == b"small"
        assert server.connections == 2
        await clients.aclose()


@pytest.mark.parametrize("garbage", [
    b"garbage\r\n\r\n",
    b"SSH-2.0-OpenSSH_9.6\r\n",
    b"HTTP/1.1 2OO OK\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\nContent-Length: two\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n",
])
async def test_garbage_is_a_broken_answer(garbage):
    async def respond(n, head, body, writer):
        writer.write(garbage)
        return False

    async with Server(respond) as server:
        clients = http.OriginClients()
        with pytest.raises(http.HttpError) as err:
            await http.aget(clients, server.url + "/", timeout=2)
        assert err.value.reason.startswith("broken HTTP answer"), err.value.reason
        await clients.aclose()


async def test_an_expected_error_status_is_an_answer():
    async with Server(static(503, b"loading")) as server:
        clients = http.OriginClients()
        resp = await http.aget(clients, server.url + "/health", timeout=2, ok_statuses={503})
        assert resp.status == 503 and resp.content == b"loading"
        with pytest.raises(http.HttpStatus):
            await http.aget(clients, server.url + "/health", timeout=2)
        assert server.connections == 1  # an error status with a whole body keeps the connection
        await clients.aclose()


async def test_connection_close_is_honoured():
    async with Server(static(headers=["Connection: close"])) as server:
        clients = http.OriginClients()
        for _ in range(3):
            assert (await http.aget(clients, server.url + "/", timeout=2)).content == b"ok"
        assert server.connections == 3
        await clients.aclose()


async def test_concurrent_gets_to_one_origin():
    async def respond(n, head, body, writer):
        await asyncio.sleep(0.01)
        writer.write(answer(body=head.split(b" ")[1]))

    async with Server(respond) as server:
        clients = http.OriginClients()
        resps = await asyncio.gather(*(http.aget(clients, f"{server.url}/{i}", timeout=2) for i in range(20)))
        assert [r.content for r in resps] == [f"/{i}".encode() for i in range(20)]
        pool = transport(clients, server.url)
        assert sum(len(idle) for idle in pool._idle.values()) == pool.max_keepalive == 8
        connections = server.connections
        await asyncio.gather(*(http.aget(clients, f"{server.url}/{i}", timeout=2) for i in range(8)))
        assert server.connections == connections  # the kept eight served the next eight
        await clients.aclose()


async def test_a_request_cancelled_mid_body_does_not_return_its_socket():
    sent = asyncio.Event()

    async def respond(n, head, body, writer):
        if n > 0:
            writer.write(answer(body=b"next"))
            return
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
        await writer.drain()
        sent.set()
        await asyncio.sleep(10)

    async with Server(respond) as server:
        clients = http.OriginClients()
        task = asyncio.create_task(http.aget(clients, server.url + "/", timeout=5))
        await asyncio.wait_for(sent.wait(), 2)
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not any(transport(clients, server.url)._idle.values())
        assert (await http.aget(clients, server.url + "/", timeout=2)).content == b"next"
        assert server.connections == 2
        await clients.aclose()


async def test_the_transport_speaks_plain_http_only():
    with pytest.raises(httpx.UnsupportedProtocol):
        await H11Transport().handle_async_request(httpx.Request("GET", "https://127.0.0.1:9/"))


def test_https_and_proxied_origins_keep_httpx_transport(monkeypatch):
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    clients = http.OriginClients()
    assert isinstance(transport(clients, "http://127.0.0.1:8000/metrics"), H11Transport)
    assert isinstance(transport(clients, "https://engine.example:8443/metrics"), httpx.AsyncHTTPTransport)

    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "spark-2")
    proxied = http.OriginClients()
    client = proxied._for("http://127.0.0.1:8000/metrics")
    assert not isinstance(client._transport, H11Transport)
    assert client._transport_for_url(httpx.URL("http://127.0.0.1:8000/metrics")) is not client._transport  # the proxy
    assert isinstance(transport(proxied, "http://spark-2:8000/metrics"), H11Transport)  # NO_PROXY


async def test_a_plain_get_skips_the_client_layer_and_asks_for_no_compression():
    """Polls and probes go straight to the transport (no cookies, redirects, hooks); other requests
    keep the whole httpx Client. The header each sends says which way it went."""
    async with Server(static(body=b"fine", headers=("Set-Cookie: a=1",))) as server:
        clients = http.OriginClients()
        try:
            got = await http.aget(clients, server.url + "/health", timeout=2)
            await http.apost(clients, server.url + "/v1/completions", timeout=2, json={"prompt": "x"})
        finally:
            await clients.aclose()
    assert got.status == 200 and got.content == b"fine" and got.headers["set-cookie"] == "a=1"
    get_head, post_head = (head.lower() for head, _ in server.requests)
    assert b"accept-encoding: identity" in get_head and b"host: 127.0.0.1:" in get_head
    assert b"accept-encoding: gzip" in post_head
    assert server.connections == 1  # both on the one kept connection of the origin's transport
