"""The first try after Redis returns (issue 31, item 5): a pooled connection to a Redis that
went away and came back is stale; the first command on it failed ("Connection closed by
server"), so the first WebSocket connect answered 500 and the worker's first live publishes
failed. The project's clients retry a command once on a connection error, on a new connection.

A real private redis-server, stopped and started again on the same port between two uses of
the project's channel layer (its CONFIG from sparkops/settings.py, only the address changed)."""

import asyncio

from django.conf import settings as django_settings

from dashboard.livebus import GROUP_OVERVIEW, LiveEvent, _publisher, publish
from sparkops.ports import free_port
from sparkops.redisproc import PrivateRedis


def _layer_on(url):
    config = django_settings.CHANNEL_LAYERS["default"]
    hosts = [{**host, "address": url} for host in config["CONFIG"]["hosts"]]
    return {"default": {**config, "CONFIG": {**config["CONFIG"], "hosts": hosts}}}


def test_the_first_publish_and_join_after_redis_restarted_succeed(settings):
    port = free_port()
    first = PrivateRedis(port=port)
    url = first.start()
    second = None
    try:
        settings.CHANNEL_LAYERS = _layer_on(url)
        event = LiveEvent("engine.sample", {"engine": "vllm-main"})
        publish(GROUP_OVERVIEW, event).result(timeout=10)  # the connection is pooled now
        first.stop()
        second = PrivateRedis(port=port)
        assert second.start() == url  # Redis is back, on the same address
        publish(GROUP_OVERVIEW, event).result(timeout=10)  # the worker's first publish after it
        # What a WebSocket's connect does first (the consumer joins its groups), on a pool
        # that went stale the same way.
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        loop = _publisher._ensure_loop()
        asyncio.run_coroutine_threadsafe(layer.group_add("sparkops.probe", "probe-channel"), loop).result(10)
        second.stop()
        second = PrivateRedis(port=port)
        second.start()
        asyncio.run_coroutine_threadsafe(layer.group_add("sparkops.probe", "probe-channel"), loop).result(10)
    finally:
        first.stop()
        if second is not None:
            second.stop()
