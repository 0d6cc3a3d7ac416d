"""The Hosts grid's live deltas through the real consumer and Redis channel layer: the fleet's
leader (`FleetWatch`, one of its upkeep duties) reads nothing while no page is open, sends every
tile and chip on its first tick after one opens, then only what changed — one engine going down
is one chip and its box's new rank — and between changes a heartbeat only when due."""

import json

import pytest
from channels.db import database_sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard.models import Engine
from sparkops.live.fleet import FleetWatch
from sparkops.live.presence import presence_key, sockets
from tests.fleetgrid import seed_fleet

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _a_presence_key_of_this_modules_own(settings):
    """No viewer but this module's sockets (the shared web server may keep the run's key alive):
    a channel prefix, and so a presence key, of the module's own, absent at the start."""
    import copy

    layers = copy.deepcopy(settings.CHANNEL_LAYERS)
    config = layers["default"].setdefault("CONFIG", {})
    config["prefix"] = f"{config.get('prefix', 'asgi')}:fleet-tests"
    settings.CHANNEL_LAYERS = layers
    sockets._marked_at = float("-inf")
    client, key = presence_key()
    if client is not None:
        client.delete(key)


async def _connect(open_socket, user):
    comm = await open_socket(user, "fleet")
    connected, _ = await comm.connect()
    assert connected
    hello = await comm.receive_json_from(timeout=3)
    assert hello["type"] == "live.hello" and "sparkops.fleet" in hello["payload"]["groups"]
    return comm


def test_with_no_page_open_the_watch_reads_nothing():
    seed_fleet(3, problems=False)
    watch = FleetWatch()
    with CaptureQueriesContext(connection) as queries:
        assert watch.tick() is None
    assert len(queries) == 0 and watch.stats["skipped"] == 1 and watch.shown is None


async def test_a_page_gets_everything_once_then_only_the_change(open_socket, viewer):
    seeded = await database_sync_to_async(seed_fleet)(50)
    watch = FleetWatch(heartbeat_s=3600)
    comm = await _connect(open_socket, viewer)
    await database_sync_to_async(lambda: watch.tick().result(5))()
    first = await comm.receive_json_from(timeout=5)
    assert first["type"] == "fleet.delta"
    assert len(first["payload"]["tiles"]) == 50 and len(first["payload"]["chips"]) == 150

    engine = next(e for e in seeded["engines"] if e.name == "box-12-llama")
    await database_sync_to_async(Engine.objects.filter(pk=engine.pk).update)(status="down")
    await database_sync_to_async(lambda: watch.tick().result(5))()
    delta = await comm.receive_json_from(timeout=5)
    payload = delta["payload"]
    assert list(payload["chips"]) == [str(engine.pk)] and payload["chips"][str(engine.pk)]["word"] == "down"
    assert list(payload["tiles"]) == [str(engine.host_id)] and payload["tiles"][str(engine.host_id)]["rank"] == 1
    assert len(json.dumps(delta)) < 400

    assert await database_sync_to_async(watch.tick)() is None  # nothing changed, no heartbeat due
    assert await comm.receive_nothing(timeout=0.5)
    assert watch.stats == {"sent": 2, "quiet": 1}
    await comm.disconnect()
