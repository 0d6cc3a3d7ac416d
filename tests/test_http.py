"""`dashboard/http.py`'s async path (aiohttp) against real servers on 127.0.0.1: the answers,
the keep-alive pool, and every failure in the words an engine card shows: refused, reset,
cut short and timed out stay apart (an engine's down cause depends on which it was)."""

import asyncio

import httpx
import pytest

from dashboard import http
from simulator.fleet import serve_many


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
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
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


# How long a test's server holds a request it never answers: far past any timeout a test gives, so a
# client that ignored its timeout is seen failing (the server hangs up) rather than timing out.
HOLD_S = 30.0


def poll_client():
    return http.async_client(headers=http.POLL_HEADERS, limit_per_host=8)


async def test_a_simulated_vllm_engine_answers_as_through_httpx():
    fleet = await serve_many(1, "vllm")
    base, clients = fleet.urls[0], poll_client()
    try:
        for path in ("/health", "/v1/models"):
            ours = await http.aget(clients, base + path, timeout=2)
            theirs = await asyncio.to_thread(http.get, base + path, timeout=2)  # httpx, the synchronous path
            assert ours.status == theirs.status == 200 and len(ours.content) == len(theirs.content)
            assert {k.lower() for k in ours.headers} == {k.lower() for k in theirs.headers}
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
        clients = poll_client()
        resp = await http.apost(clients, server.url + "/a/b?x=1&y=%20", timeout=2, content=b"payload")
        assert resp.status == 201 and resp.content == b"got payload /a/b?x=1&y=%20"
        assert resp.headers["x-thing"] == "Yes"
        head = server.requests[0][0].lower()
        assert head.startswith(b"post /a/b?x=1&y=%20 http/1.1\r\n")
        assert b"\r\nhost: 127.0.0.1:" in head and f"\r\nuser-agent: {http.USER_AGENT}\r\n".encode() in head
        await clients.aclose()


async def test_sequential_gets_share_one_connection():
    async with Server(static()) as server:
        clients = poll_client()
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
        clients = poll_client()
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
        clients = poll_client()
        assert (await http.aget(clients, server.url + "/", timeout=2)).content == b"ok0"
        assert (await http.aget(clients, server.url + "/", timeout=2)).content == b"ok2"
        assert server.connections == 2 and len(server.requests) == 3
        await clients.aclose()


async def test_a_get_dropped_mid_answer_is_retried_once_a_post_never():
    """aiohttp retries an idempotent request once when the connection drops (RFC 9112 §9.3.1);
    a poll is a GET, bounded by its total timeout either way. A POST is never sent twice."""

    async def respond(n, head, body, writer):
        if n in (1, 2, 4):
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Le")
            return False
        writer.write(answer(body=b"ok%d" % n))

    async with Server(respond) as server:
        clients = poll_client()
        assert (await http.aget(clients, server.url + "/", timeout=2)).content == b"ok0"
        with pytest.raises(http.HttpError) as err:
            await http.aget(clients, server.url + "/", timeout=2)  # requests 1 and 2: both cut
        assert err.value.reason.startswith("broken HTTP answer"), err.value.reason
        assert len(server.requests) == 3
        assert (await http.aget(clients, server.url + "/", timeout=2)).content == b"ok3"
        with pytest.raises(http.HttpError) as err:
            await http.apost(clients, server.url + "/", timeout=2, content=b"once")
        assert err.value.reason.startswith("broken HTTP answer") and len(server.requests) == 5
        await clients.aclose()


async def test_a_server_that_hangs_up_without_an_answer_is_a_disconnect_not_a_timeout():
    async def respond(n, head, body, writer):
        return False

    async with Server(respond) as server:
        clients = poll_client()
        with pytest.raises(http.HttpError) as err:  # a client that waited for its timeout would raise Timeout
            await http.aget(clients, server.url + "/", timeout=HOLD_S)
        assert not isinstance(err.value, (http.Timeout, http.Refused))
        assert err.value.reason == "broken HTTP answer: server disconnected"
        await clients.aclose()


async def test_connection_refused():
    async with Server(static()) as server:
        url = server.url
    await asyncio.sleep(0.05)
    clients = poll_client()
    with pytest.raises(http.Refused) as err:
        await http.aget(clients, url + "/health", timeout=2)
    assert err.value.reason == "connection refused"
    await clients.aclose()


@pytest.mark.parametrize("timeout, reason", [(0.3, "timed out"), (httpx.Timeout(5, read=0.2), "timed out (read)")])
async def test_a_server_that_never_answers_times_out(timeout, reason):
    """The server holds the request until the test ends (at most HOLD_S, then hangs up without an
    answer): a Timeout raised while it still holds is the client's own timer, not the server's
    hang-up (which is a disconnect), and "(read)" says the read timer fired, not the 5 s total."""
    released, expired = asyncio.Event(), asyncio.Event()

    async def respond(n, head, body, writer):
        try:
            await asyncio.wait_for(released.wait(), HOLD_S)
        except TimeoutError:
            expired.set()
        return False

    async with Server(respond) as server:
        clients = poll_client()
        try:
            with pytest.raises(http.Timeout) as err:
                await http.aget(clients, server.url + "/", timeout=timeout)
            assert not expired.is_set() and err.value.reason.startswith(reason), err.value.reason
            assert not clients.session().connector._conns  # the hung connection is not kept
        finally:
            released.set()
        await clients.aclose()


async def test_a_truncated_body_is_a_broken_answer():
    async def respond(n, head, body, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 10)
        return False

    async with Server(respond) as server:
        clients = poll_client()
        with pytest.raises(http.HttpError) as err:
            await http.aget(clients, server.url + "/", timeout=2)
        assert err.value.reason.startswith("broken HTTP answer: body cut short")
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
        clients = poll_client()
        with pytest.raises(http.TooLarge):
            await http.aget(clients, server.url + "/", timeout=5, max_bytes=1024 * 1024)
        assert (await http.aget(clients, server.url + "/", timeout=5)).content == b"small"
        assert server.connections == 2
        await clients.aclose()


@pytest.mark.parametrize(
    "garbage",
    [
        b"garbage\r\n\r\n",
        b"SSH-2.0-OpenSSH_9.6\r\n",
        b"HTTP/1.1 2OO OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: two\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n",
    ],
)
async def test_garbage_is_a_broken_answer(garbage):
    async def respond(n, head, body, writer):
        writer.write(garbage)
        return False

    async with Server(respond) as server:
        clients = poll_client()
        with pytest.raises(http.HttpError) as err:
            await http.aget(clients, server.url + "/", timeout=2)
        assert err.value.reason.startswith("broken HTTP answer"), err.value.reason
        await clients.aclose()


async def test_an_expected_error_status_is_an_answer():
    async with Server(static(503, b"loading")) as server:
        clients = poll_client()
        resp = await http.aget(clients, server.url + "/health", timeout=2, ok_statuses={503})
        assert resp.status == 503 and resp.content == b"loading"
        with pytest.raises(http.HttpStatus):
            await http.aget(clients, server.url + "/health", timeout=2)
        assert server.connections == 1  # an error status with a whole body keeps the connection
        await clients.aclose()


async def test_connection_close_is_honoured():
    async with Server(static(headers=["Connection: close"])) as server:
        clients = poll_client()
        for _ in range(3):
            assert (await http.aget(clients, server.url + "/", timeout=2)).content == b"ok"
        assert server.connections == 3
        await clients.aclose()


async def test_concurrent_gets_to_one_origin():
    async def respond(n, head, body, writer):
        await asyncio.sleep(0.01)
        writer.write(answer(body=head.split(b" ")[1]))

    async with Server(respond) as server:
        clients = poll_client()
        resps = await asyncio.gather(*(http.aget(clients, f"{server.url}/{i}", timeout=2) for i in range(20)))
        assert [r.content for r in resps] == [f"/{i}".encode() for i in range(20)]
        assert server.connections == 8  # limit_per_host: the other twelve waited for one of the eight
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
        clients = poll_client()
        task = asyncio.create_task(http.aget(clients, server.url + "/", timeout=5))
        await asyncio.wait_for(sent.wait(), 2)
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await http.aget(clients, server.url + "/", timeout=2)).content == b"next"
        assert server.connections == 2
        await clients.aclose()


async def test_a_poll_asks_for_no_compression_and_a_post_sends_its_body():
    async with Server(static(body=b"fine", headers=("Set-Cookie: a=1",))) as server:
        clients = poll_client()
        try:
            got = await http.aget(clients, server.url + "/health", timeout=2)
            await http.apost(clients, server.url + "/v1/completions", timeout=2, json={"prompt": "x"})
        finally:
            await clients.aclose()
    assert got.status == 200 and got.content == b"fine" and got.headers["set-cookie"] == "a=1"
    (get_head, _), (post_head, post_body) = ((head.lower(), body) for head, body in server.requests)
    assert b"accept-encoding: identity" in get_head and b"host: 127.0.0.1:" in get_head
    assert post_body == b'{"prompt": "x"}' and b"content-type: application/json" in post_head
    assert server.connections == 1  # both on the one kept connection


async def test_a_redirect_is_not_followed_and_says_where_it_pointed():
    async with Server(static(302, b"", ["Location: /elsewhere"])) as server:
        clients = poll_client()
        with pytest.raises(http.HttpStatus) as err:
            await http.aget(clients, server.url + "/metrics", timeout=2)
        await clients.aclose()
    assert err.value.reason == "HTTP 302 redirect to /elsewhere (not followed)" and len(server.requests) == 1


async def test_a_timeout_is_required():
    with pytest.raises(TypeError):
        await http.aget(poll_client(), "http://127.0.0.1:9/", timeout=None)


def test_proxies_from_the_environment_apply_per_origin(monkeypatch):
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    assert poll_client().proxy_for("http://127.0.0.1:8000/metrics") is None
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "spark-2")
    clients = poll_client()
    assert clients.proxy_for("http://spark-1:8000/metrics") == "http://proxy.example:3128"
    assert clients.proxy_for("http://spark-2:8000/metrics") is None  # NO_PROXY
    assert clients.proxy_for("https://spark-1:8443/metrics") is None  # no HTTPS_PROXY


async def test_a_poll_hands_nothing_to_a_thread():
    """aiohttp's trust_env reads ~/.netrc on an executor thread for every request: a thread
    hand-off per poll. The poll client must not."""
    import concurrent.futures

    handed = []
    loop = asyncio.get_running_loop()

    class Watching(concurrent.futures.ThreadPoolExecutor):
        def submit(self, fn, *args, **kwargs):
            handed.append(fn)
            return super().submit(fn, *args, **kwargs)

    loop.set_default_executor(Watching(max_workers=1))
    async with Server(static()) as server:
        clients = poll_client()
        for _ in range(3):
            assert (await http.aget(clients, server.url + "/", timeout=2)).content == b"ok"
        await clients.aclose()
    assert handed == []
