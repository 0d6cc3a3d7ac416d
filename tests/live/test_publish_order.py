"""Live events reach a group in the order they were published (the per-process publisher sends
one group_send at a time): a sweep's "cell 2 done" once came after "cell 4 running"."""

import asyncio

from channels.layers import get_channel_layer

from dashboard.livebus import LiveEvent, publish


def test_events_published_back_to_back_arrive_in_order():
    layer = get_channel_layer()

    async def listen():
        channel = await layer.new_channel()
        await layer.group_add("order-test", channel)
        return channel

    channel = asyncio.run(listen())
    futures = [publish("order-test", LiveEvent(type="t", payload={"n": n})) for n in range(60)]
    for future in futures:
        future.result(timeout=30)

    async def drain():
        got = [(await layer.receive(channel))["event"]["payload"]["n"] for _ in range(60)]
        await layer.group_discard("order-test", channel)
        return got

    assert asyncio.run(drain()) == list(range(60))
