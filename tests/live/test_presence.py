"""Viewer presence gates the sample pushes: with no live socket open anywhere a poll renders
no card and sends nothing; a socket opening brings them back; its closing (after the TTL)
stops them again. Alert events are never gated; a broken presence check fails open."""

import asyncio
import time

import pytest
import redis
from channels.db import database_sync_to_async
from django.conf import settings as django_settings
from django.utils import timezone

from sparkops.live.presence import DEFAULT_CACHE_S, DEFAULT_TTL_S, Viewers, presence_key, sockets
from sparkops.live.publish import LivePublisher
from sparkops.poller.liveness import Liveness
from sparkops.ports import free_port

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _a_presence_key_of_this_modules_own(settings):
    """These tests count on no viewer but their own sockets. The test process's shared web server
    (tests/conftest.py `shared_web`) keeps the run's presence key alive for its product TTL (60 s)
    after any page of another test connected to it, so here the channel layer has a prefix of its
    own, and so does the key; it starts absent, as the run's key does for the other live tests."""
    import copy

    from sparkops.live.presence import presence_key, sockets

    layers = copy.deepcopy(settings.CHANNEL_LAYERS)
    config = layers["default"].setdefault("CONFIG", {})
    config["prefix"] = f"{config.get('prefix', 'asgi')}:presence-tests"
    settings.CHANNEL_LAYERS = layers
    sockets._marked_at = float("-inf")
    client, key = presence_key()
    if client is not None:
        client.delete(key)


SAMPLES = {"engine.sample", "host.sample"}
READING = {"up": True, "status": "up", "models": ["qwen3-8b"], "generation_tokens_per_s": 42.0}
HOST_READING = {"host": {"mem_total_bytes": 8 << 30, "mem_available_bytes": 2 << 30}, "gpus": [], "processes": {}}


def samples(sent):
    return [call for call in sent if call[1] in SAMPLES]


def poll_everything(fleet, live=None):
    """One metrics tick's and one probe's pushes, as a poller's publisher makes them."""
    live = live or LivePublisher()
    vllm, llama, host = fleet["vllm"], fleet["llama"], fleet["host"]
    for engine in (vllm, llama):
        engine.latest, engine.last_poll_at = READING, timezone.now()
    live.engines_polled([(vllm, READING), (llama, READING)])
    live.host_polled(host, HOST_READING)
    live.liveness(Liveness(llama, "down", "connection refused", True, timezone.now(), changed=True))


async def _connect(open_socket, user, groups="overview"):
    comm = await open_socket(user, groups)
    connected, _ = await comm.connect()
    assert connected
    assert (await comm.receive_json_from(timeout=3))["type"] == "live.hello"
    return comm


def test_with_no_socket_open_a_poll_renders_and_sends_no_samples(fleet, sent):
    live = LivePublisher()
    for _ in range(5):
        poll_everything(fleet, live)
    assert samples(sent) == []
    assert live.stats["engine.sample"] == live.stats["host.sample"] == 0  # no card rendered
    assert live.stats["skipped"] == 5 * (2 + 1 + 1)
    assert live.viewers.lookups == 1  # five cycles, one Redis read: the answer is cached


def test_alert_events_go_out_without_a_viewer(fleet, sent):
    from sparkops.alerts.models import AlertEvent
    from sparkops.alerts.publish import alert_changed

    event = AlertEvent.objects.create(
        rule="engine_down",
        severity="critical",
        state="firing",
        engine=fleet["llama"],
        subject="engine llama-side",
        message="down",
        started_at=timezone.now(),
    )
    assert not Viewers().present()
    alert_changed(event)
    assert ("sparkops.all", "alert.changed") in sent


async def test_an_open_socket_gets_samples_again(open_socket, viewer, fleet, sent):
    await database_sync_to_async(poll_everything)(fleet)
    assert samples(sent) == []
    comm = await _connect(open_socket, viewer)
    await database_sync_to_async(poll_everything)(fleet)
    got = [await comm.receive_json_from(timeout=3) for _ in range(4)]
    assert sorted(e["type"] for e in got) == ["engine.sample"] * 3 + ["host.sample"]
    assert {e["payload"]["engine"] for e in got if e["type"] == "engine.sample"} == {"vllm-main", "llama-side"}
    await comm.disconnect()


async def test_pushes_stop_once_the_last_socket_closed_and_the_ttl_passed(open_socket, viewer, fleet, sent, settings):
    settings.SPARKOPS_LIVE_PRESENCE_TTL = 3.0
    settings.SPARKOPS_LIVE_PRESENCE_CACHE = 0.2
    _client, key = presence_key()
    comm = await _connect(open_socket, viewer)
    await comm.disconnect()
    await database_sync_to_async(poll_everything)(fleet)  # the key outlives the socket by up to the TTL
    assert len(samples(sent)) == 2 * 3 + 2
    watcher = redis.Redis.from_url(django_settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]["address"])
    deadline = time.monotonic() + 15
    while watcher.exists(key):  # the TTL passes (seen, so a loaded machine is only slower)
        assert time.monotonic() < deadline, "the closed socket's presence key never expired"
        await asyncio.sleep(0.05)
    deadline = time.monotonic() + 15
    while True:  # and once the presence cache (0.2 s) has aged, a poll pushes nothing
        sent.clear()
        await database_sync_to_async(poll_everything)(fleet)
        if not samples(sent):
            break
        assert time.monotonic() < deadline, "pushes went on after the presence key expired"
        await asyncio.sleep(0.05)


async def test_an_open_socket_keeps_its_presence_alive(open_socket, viewer, fleet, settings):
    settings.SPARKOPS_LIVE_PRESENCE_TTL = 2.0  # refreshed every 0.67 s while the socket is open
    client, key = presence_key()

    async def until(predicate, timeout=15.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return True
            except redis.exceptions.TimeoutError:  # the presence client's short read timeout, at load
                pass
            await asyncio.sleep(0.02)
        return False

    comm = await _connect(open_socket, viewer)
    # The key ages, then its time to live goes up again: the open socket refreshed it (seen as it
    # happens, so a loaded machine only makes the test slower, never wrong).
    assert await until(lambda: 0 < client.pttl(key) < 1600), "the presence key was not set, or never aged"
    assert await until(lambda: client.pttl(key) > 1700), "the open socket did not refresh its presence key"
    await comm.disconnect()
    assert await until(lambda: not client.exists(key)), "the closed socket's key was kept alive"


def test_a_socket_in_another_process_is_seen_within_the_cache_time(fleet, sent, settings):
    """The worker's poller and the web server's sockets live in different processes: Redis joins them."""
    settings.SPARKOPS_LIVE_PRESENCE_CACHE = 0.3
    live = LivePublisher()
    assert not live.viewers.present()
    client, key = presence_key()
    client.set(key, "1", px=5000)  # what a socket in the web server does on connect
    deadline = time.monotonic() + 1.0
    while not live.viewers.present():
        assert time.monotonic() < deadline, "a viewer elsewhere was not seen"
        time.sleep(0.05)
    poll_everything(fleet, live)
    assert len(samples(sent)) == 2 * 3 + 2


def test_defaults_bring_a_new_page_its_samples_within_a_poll_or_two():
    assert DEFAULT_CACHE_S <= django_settings.SPARKOPS_POLL_INTERVAL
    assert DEFAULT_TTL_S >= 30  # three refreshes per TTL: a slow refresh does not blink the pushes


def test_unreachable_redis_fails_open(fleet, sent, monkeypatch):
    # Only the presence check loses its Redis (changing CHANNEL_LAYERS would rebuild the layer too).
    dead = f"redis://127.0.0.1:{free_port()}/0"
    monkeypatch.setattr("sparkops.live.presence._redis_target", lambda: (dead, "sp-dead"))
    assert Viewers().present() is True
    sockets.mark(opened=True)  # a socket's mark does not raise either
    sockets.forget()
    poll_everything(fleet, LivePublisher())
    assert len(samples(sent)) == 2 * 3 + 2


def test_a_layer_that_is_not_redis_counts_as_present(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    assert Viewers().present() is True


def test_the_pollers_publisher_and_the_hosts_grid_share_one_presence_read(fleet, settings, tmp_path):
    """The leading worker's Hosts-grid watch asks "is a page open?" as often as its live publisher:
    one cached Redis read answers both (each asking apart was a Redis round trip a second)."""
    from sparkops.poller.resident import ResidentPoller
    from tests.waiting import HAND_TICKED

    settings.SPARKOPS_SPOOL_DIR = str(tmp_path / "spool")
    poller = ResidentPoller("spark-1", poll_interval=HAND_TICKED)
    watch = poller.duties["live-fleet"][1].__self__
    assert watch.viewers is poller.live.viewers
    assert poller.live.viewers.present() is False
    assert watch.tick() is None  # nobody looks: nothing judged, nothing sent
    assert poller.live.viewers.lookups == 1
