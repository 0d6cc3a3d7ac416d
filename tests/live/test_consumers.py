"""The live socket through the real ASGI stack: login required, groups and payloads per role."""

import pytest
from channels.db import database_sync_to_async

from dashboard.livebus import GROUP_ALL, GROUP_OVERVIEW, LiveEvent, engine_group

pytestmark = pytest.mark.django_db(transaction=True)


async def _connect(open_socket, user, groups=""):
    comm = await open_socket(user, groups)
    connected, _ = await comm.connect()
    assert connected
    hello = await comm.receive_json_from(timeout=3)
    assert hello["type"] == "live.hello"
    return comm, hello["payload"]


async def test_anonymous_socket_is_refused(open_socket, fleet):
    comm = await open_socket(None, "overview")
    connected, code = await comm.connect()
    assert not connected
    assert code == 4401


async def test_viewer_joins_only_groups_that_exist_and_are_public(open_socket, viewer, fleet):
    llama = fleet["llama"]
    comm, hello = await _connect(open_socket, viewer, f"overview,engine.{llama.id},engine.99999,sparkops.operators")
    assert hello["role"] == "viewer"
    assert sorted(hello["groups"]) == sorted([GROUP_ALL, GROUP_OVERVIEW, engine_group(llama.id)])
    await comm.disconnect()


async def test_engine_page_receives_its_engine_only(open_socket, viewer, fleet, layer):
    vllm, llama = fleet["vllm"], fleet["llama"]
    comm, _ = await _connect(open_socket, viewer, f"engine.{llama.id}")
    other = LiveEvent(type="engine.sample", payload={"engine": vllm.name, "id": vllm.id})
    await layer.group_send(engine_group(vllm.id), other.as_message())
    assert await comm.receive_nothing(timeout=0.3)
    mine = LiveEvent(type="engine.sample", payload={"engine": llama.name, "id": llama.id, "points": {"up": 0.0}})
    await layer.group_send(engine_group(llama.id), mine.as_message())
    got = await comm.receive_json_from(timeout=3)
    assert got == {"type": "engine.sample", "payload": mine.payload}
    await comm.disconnect()


async def test_an_alert_change_reaches_every_role_as_facts_without_markup(open_socket, viewer, operator, fleet):
    """One way to show an alert change: the event says what moved, the page fetches its list."""
    from django.utils import timezone

    from sparkops.alerts.models import AlertEvent
    from sparkops.alerts.publish import alert_changed

    as_viewer, _ = await _connect(open_socket, viewer, "overview")
    as_operator, _ = await _connect(open_socket, operator, "overview")

    def fire():
        event = AlertEvent.objects.create(
            rule="engine_down",
            subject="vllm-main",
            severity="critical",
            state="firing",
            message="down",
            started_at=timezone.now(),
        )
        alert_changed(event)
        return event

    event = await database_sync_to_async(fire)()
    for comm in (as_viewer, as_operator):
        got = await comm.receive_json_from(timeout=3)
        assert got["type"] == "alert.changed" and got["payload"]["id"] == event.pk
        assert got["payload"]["state"] == "firing" and "html" not in got["payload"]
        await comm.disconnect()


async def test_a_polled_engine_pushes_card_and_numbers(open_socket, viewer, fleet):
    from sparkops.live.publish import LivePublisher

    llama = fleet["llama"]
    comm, _ = await _connect(open_socket, viewer, "overview")
    reading = {
        "up": True,
        "status": "up",
        "models": ["qwen3-8b"],
        "generation_tokens_per_s": 61.5,
        "kv_cache_usage": 0.42,
        "requests_running": 3,
        "prefix_cache_hit_rate": float("nan"),
    }

    def poll():
        llama.status, llama.status_reason = "up", ""
        llama.latest = {k: v for k, v in reading.items() if k != "prefix_cache_hit_rate"}
        llama.save()
        LivePublisher().engines_polled([(llama, reading)])

    await database_sync_to_async(poll)()
    got = await comm.receive_json_from(timeout=3)
    assert got["type"] == "engine.sample" and got["payload"]["id"] == llama.id
    assert got["payload"]["points"] == {
        "up": 1.0,
        "generation_tokens_per_s": 61.5,
        "kv_cache_usage": 0.42,
        "requests_running": 3.0,
    }
    assert "qwen3-8b" in got["payload"]["html"] and "42 %" in got["payload"]["html"]
    await comm.disconnect()


async def test_an_idle_socket_stays_subscribed(open_socket, viewer, fleet, layer):
    """redis-py 8's default 5 s read timeout used to kill every socket idle for 5 s."""
    import asyncio

    comm, _ = await _connect(open_socket, viewer, "overview")
    await asyncio.sleep(6)
    await layer.group_send(GROUP_OVERVIEW, LiveEvent(type="engine.sample", payload={"id": 1}).as_message())
    assert (await comm.receive_json_from(timeout=3))["payload"] == {"id": 1}
    await comm.disconnect()
