"""Engines answering garbage, against real servers on 127.0.0.1: every case is a failed
reading with its reason stored, never an exception, and the next poll proceeds."""

import socket
import threading

import pytest

from dashboard import http
from dashboard.models import Engine
from tests.collectors.conftest import fixture_bytes, reply
from tests.holds import HOLD_S, Hold
from tests.polls import poll, poll_one

pytestmark = pytest.mark.django_db(transaction=True)
MODELS = fixture_bytes("vllm", "0.33.0_v1_models.json")
GOOD = fixture_bytes("vllm", "0.33.0_metrics_busy.txt")


def routes_with(metrics_route):
    return {"/health": (200, b"", {}), "/v1/models": (200, MODELS, {}), "/metrics": metrics_route}


def truncated(handler):
    """Promise 10 kB, send a torn line, close."""
    handler.send_response(200)
    handler.send_header("Content-Length", "10000")
    handler.end_headers()
    handler.wfile.write(GOOD[:700])
    handler.wfile.flush()
    handler.close_connection = True


HANG = object()  # CASES' hung route: each test's own Hold


def junk_10mb(handler):
    handler.send_response(200)
    handler.send_header("Content-Type", "text/plain")
    handler.end_headers()  # no Content-Length: the cap must stop the stream itself
    try:
        for _ in range(160):
            handler.wfile.write(b"x" * 65536)
    except (BrokenPipeError, ConnectionResetError):
        pass
    handler.close_connection = True


HUGE_LABELS = b"vllm:num_requests_running{" + b",".join(b'l%d="v"' % i for i in range(100_000)) + b"} 1\n"
ALL_NAN = b"".join(
    line.rsplit(b" ", 1)[0] + b" NaN\n" if line.startswith(b"vllm:") else line + b"\n" for line in GOOD.splitlines()
)


CASES = {
    "html": ((200, b"<!DOCTYPE html><html><head><title>Sign in</title></head></html>", {}), "not Prometheus"),
    "truncated_text": ((200, GOOD[: GOOD.index(b"engine=") + 9], {}), "/metrics: Prometheus text cut short"),
    "huge_labels": ((200, GOOD + HUGE_LABELS, {}), "/metrics: label limits exceeded"),
    "redirect": (
        (302, b"", {"Location": "/login?next=/metrics"}),
        "metrics: HTTP 302 redirect to /login?next=/metrics",
    ),
    "truncated_transfer": (truncated, "broken HTTP answer"),
    "invalid_utf8": (
        (200, b'vllm:num_requests_running{engine="0"} 1.0\n\xff\xfe\xfa', {}),
        "/metrics: response is not UTF-8",
    ),
    "junk_10mb": (junk_10mb, "too large"),
    "hang": (HANG, "timed out"),
    "http_500": ((500, b"Internal Server Error", {}), "HTTP 500"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_garbage_is_a_failed_reading_and_the_next_poll_proceeds(case, fleet, http_server, settings):
    settings.SPARKOPS_POLL_INTERVAL = 1.0  # timeout 0.75 s
    route, reason = CASES[case]
    hold = Hold()
    routes = routes_with(hold if route is HANG else route)
    engine = fleet["vllm"]
    Engine.objects.filter(pk=engine.pk).update(url=http_server(routes))
    engine.refresh_from_db()
    reading = poll_one(engine)
    assert reading["up"] is False and reason in reading["error"], reading["error"]
    assert not hold.expired.is_set()  # a hung /metrics: the poll's own timeout ended it
    engine.refresh_from_db()
    assert engine.status == "down" and reason in engine.status_reason
    routes["/metrics"] = (200, GOOD, {})
    assert poll_one(engine)["up"] is True


def test_a_redirect_on_health_is_a_down_engine_that_says_so(fleet, http_server):
    engine = fleet["vllm"]
    routes = routes_with((200, GOOD, {}))
    routes["/health"] = (307, b"", {"Location": "https://sso.example/login"})
    Engine.objects.filter(pk=engine.pk).update(url=http_server(routes))
    engine.refresh_from_db()
    reading = poll_one(engine)
    assert (
        reading["up"] is False and "HTTP 307 redirect to https://sso.example/login (not followed)" in reading["error"]
    )


def test_a_json_bomb_on_models_is_named_and_the_metrics_still_count(fleet, http_server):
    engine, asked = fleet["vllm"], []
    bomb = b"[" * 200_000 + b"]" * 200_000

    def models(handler):
        asked.append(1)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(bomb)))
        handler.end_headers()
        handler.wfile.write(bomb)

    routes = routes_with((200, GOOD, {}))
    routes["/v1/models"] = models
    Engine.objects.filter(pk=engine.pk).update(url=http_server(routes))
    engine.refresh_from_db()
    reading = poll_one(engine)
    assert reading["up"] is True and reading["requests_running"] == 2.0
    assert "/v1/models: response is a JSON bomb" in reading["error"]
    engine.refresh_from_db()
    again = poll_one(engine)  # the models are not asked again for a minute: what was wrong is carried
    assert len(asked) == 1 and again["up"] is True and "/v1/models: response is a JSON bomb" in again["error"]


def test_scrape_limits_are_settings(fleet, http_server, settings):
    settings.SPARKOPS_SCRAPE_SAMPLE_LIMIT = 5
    engine = fleet["vllm"]
    Engine.objects.filter(pk=engine.pk).update(url=http_server(routes_with((200, GOOD, {}))))
    engine.refresh_from_db()
    reading = poll_one(engine)
    assert reading["up"] is False and "sample_limit exceeded (over 5 wanted samples)" in reading["error"]


def test_a_pathological_engine_costs_the_others_nothing(fleet, http_server, settings):
    """One engine's /metrics holds one line with 100,000 labels (1.5 MB): it fails on the
    label limit without reaching the parser, and the healthy engine of the same tick is read."""
    settings.SPARKOPS_POLL_INTERVAL = 1.0
    Engine.objects.filter(pk=fleet["vllm"].pk).update(url=http_server(routes_with((200, GOOD, {}))))
    Engine.objects.filter(pk=fleet["llama"].pk).update(
        kind="vllm", url=http_server(routes_with((200, GOOD + HUGE_LABELS, {})))
    )
    readings = {r["name"]: r for r in poll(*Engine.objects.all())}
    assert readings["vllm-main"]["up"] and readings["vllm-main"]["requests_running"] == 2.0
    assert "label limits exceeded" in readings["llama-side"]["error"]


def test_an_exposition_of_nothing_but_nan_says_so_not_that_metrics_are_missing(fleet, http_server):
    engine = fleet["vllm"]
    Engine.objects.filter(pk=engine.pk).update(url=http_server(routes_with((200, ALL_NAN, {}))))
    engine.refresh_from_db()
    reading = poll_one(engine)
    assert reading["error"].startswith("every vllm:* sample is NaN or ±Inf (vllm:num_requests_running=nan")
    assert reading["requests_running"] is None and reading["kv_cache_usage"] is None


def test_nan_values_are_absent_not_zero(fleet, http_server):
    nan_body = GOOD.replace(
        b'vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-8B"} 0.0412',
        b'vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-8B"} NaN',
    )
    assert nan_body != GOOD
    engine = fleet["vllm"]
    Engine.objects.filter(pk=engine.pk).update(url=http_server(routes_with((200, nan_body, {}))))
    engine.refresh_from_db()
    reading = poll_one(engine)
    assert reading["up"] is True and reading["kv_cache_usage"] is None and reading["requests_running"] == 2.0


def test_one_hung_engine_does_not_delay_the_others(fleet, http_server):
    """The good engine answers /metrics only once the hung one has been asked, and is answered
    before the hung one's poll gives up: the two were asked together. Asked in turn, the good one
    first would time out waiting for that request; the hung one first would give up before the
    good one was asked. (A 3 s poll timeout: the order cannot turn on a loaded box's scheduling.)"""
    log: list = []
    hold = Hold(log)

    def good_metrics(handler):
        hold.arrived.wait(HOLD_S)
        reply(handler, (200, GOOD, {}))
        log.append(("answered", handler.path))

    Engine.objects.update(poll_interval_s=4.0)  # poll timeout 3 s each
    Engine.objects.filter(pk=fleet["vllm"].pk).update(url=http_server(routes_with(good_metrics)))
    Engine.objects.filter(pk=fleet["llama"].pk).update(
        kind="vllm", url=http_server({"/health": hold, "/metrics": hold, "/v1/models": hold})
    )
    readings = {r["name"]: r for r in poll(*Engine.objects.all())}
    assert readings["vllm-main"]["up"], readings["vllm-main"]["error"]
    assert "timed out" in readings["llama-side"]["error"] and not hold.expired.is_set()
    assert log.index(("answered", "/metrics")) < min(i for i, (what, _) in enumerate(log) if what == "gave up"), log


def test_silent_socket_that_accepts_but_never_answers():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/metrics"
    closer = threading.Timer(HOLD_S, sock.close)  # a client that ignored its timeout: reset, not Timeout
    closer.start()
    try:
        with pytest.raises(http.Timeout):
            http.get(url, timeout=0.3)
    finally:
        closer.cancel()
        sock.close()


def test_timeout_is_required():
    with pytest.raises(TypeError):
        http.get("http://127.0.0.1:9/", timeout=None)


@pytest.mark.parametrize("props", [b"[1]", b'"ok"', b"42", b"<html>props</html>"])
def test_optional_llamacpp_endpoint_with_the_wrong_json_type_is_ignored(props, fleet, http_server):
    def llama(name):
        return (200, fixture_bytes("llamacpp", f"b0-0c1e570_{name}"), {})

    engine = fleet["llama"]
    Engine.objects.filter(pk=engine.pk).update(
        url=http_server(
            {
                "/health": llama("health_ok.json"),
                "/metrics": llama("metrics.txt"),
                "/slots": llama("slots_one_busy.json"),
                "/v1/models": llama("v1_models.json"),
                "/props": (200, props, {}),
            }
        )
    )
    engine.refresh_from_db()
    reading = poll_one(engine)
    assert reading["up"] is True and reading["models"] == ["tiny-llama"] and reading["window"] is None
