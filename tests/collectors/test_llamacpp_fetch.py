"""How a llama.cpp server is read: over one connection, its endpoints in turn, within the poll's
timeout (cpp-httplib gives each kept-alive connection a thread of the server's: see
EngineCollector._in_turn), and a slow endpoint the poll could not read is read again at the next
poll, not a minute later. Against a real HTTP/1.1 keep-alive server on 127.0.0.1."""

import threading

import pytest

from dashboard.models import Engine
from tests.collectors.conftest import fixture_bytes, reply
from tests.polls import poll_one

pytestmark = pytest.mark.django_db(transaction=True)
N_CTX = 256  # the props fixture's default_generation_settings.n_ctx


def llama(name):
    return (200, fixture_bytes("llamacpp", f"b0-0c1e570_{name}"), {})


def recorded(routes, seen):
    """ROUTES whose every answer first records (path, the client's port) in SEEN."""

    def answer(path, route):
        def handle(handler):
            with lock:
                seen.append((path, handler.client_address[1]))
            return reply(handler, route)

        return handle

    lock = threading.Lock()
    return {path: answer(path, route) for path, route in routes.items()}


def llama_routes(**override):
    routes = {
        "/health": llama("health_ok.json"),
        "/metrics": llama("metrics.txt"),
        "/slots": llama("slots_one_busy.json"),
        "/v1/models": llama("v1_models.json"),
        "/props": llama("props.json"),
    }
    return {**routes, **override}


def at(engine, url):
    Engine.objects.filter(pk=engine.pk).update(url=url)
    engine.refresh_from_db()
    return engine


def test_a_llama_server_is_read_over_one_connection(fleet, http_server):
    seen = []
    engine = at(fleet["llama"], http_server(recorded(llama_routes(), seen)))
    reading = poll_one(engine)
    assert reading["up"] is True and reading["window"] == N_CTX and not reading["error"], reading
    assert sorted(path for path, _ in seen) == ["/health", "/metrics", "/props", "/slots", "/v1/models"]
    # all five on one connection: fetched at once they came on five, and each held one of the
    # server's threads for its keep-alive
    assert len({port for _, port in seen}) == 1, seen


def test_a_hung_endpoint_spends_the_polls_timeout_and_what_it_missed_is_read_at_the_next_poll(fleet, http_server):
    released = threading.Event()

    def hung_slots(handler):
        released.wait(10)  # past the poll's timeout (1.5 s)
        handler.close_connection = True

    seen = []
    routes = recorded(llama_routes(**{"/slots": hung_slots}), seen)
    engine = at(fleet["llama"], http_server(routes))
    try:
        reading = poll_one(engine)
    finally:
        released.set()
    # The engine answered /health and /metrics: up. /slots spent what was left of the poll's
    # timeout, so /props and /v1/models were not asked this poll (it is bounded as a whole).
    assert reading["up"] is True and reading["window"] is None, reading
    assert "/slots: timed out" in reading["error"] and "/props: timed out" in reading["error"], reading["error"]
    assert [path for path, _ in seen] == ["/health", "/metrics", "/slots"]

    routes["/slots"] = recorded({"/slots": llama("slots_one_busy.json")}, seen)["/slots"]
    engine.refresh_from_db()
    again = poll_one(engine)
    # read again at once, not STATIC_REFRESH_S later: the window is known, the reason gone
    assert again["up"] is True and again["window"] == N_CTX and not again["error"], again
    assert [path for path, _ in seen[3:]] == ["/health", "/metrics", "/slots", "/props", "/v1/models"]
