"""Writing an entry or a correction publishes "changelog.entry" to the live group after commit."""

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from dashboard.livebus import GROUP_ALL
from sparkops.changelog.services import correction_create, entry_create

from .conftest import at


async def _receive(layer, channel, n):
    # One event loop for all receives: channels_redis buffers per loop.
    return [(await asyncio.wait_for(layer.receive(channel), 5))["event"] for _ in range(n)]


@pytest.mark.django_db(transaction=True)
def test_entry_and_correction_are_published(pair):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(GROUP_ALL, channel)
    try:
        entry = entry_create(
            effective_at=at("2026-08-20 09:00"), kind="claim", title="Raise the window", engines=[pair["nemotron"]]
        )
        correction_create(entry=entry, text_md="cost 2.7 %", mark="")
        first, second = async_to_sync(_receive)(layer, channel, 2)
    finally:
        async_to_sync(layer.group_discard)(GROUP_ALL, channel)
    assert first["type"] == second["type"] == "changelog.entry"
    assert first["payload"] == {
        "id": entry.pk,
        "time": "2026-08-20T09:00:00+00:00",
        "title": "Raise the window",
        "kind": "claim",
        "url": entry.get_absolute_url(),
        "engines": ["nemotron"],
        "corrected": False,
    }
    assert second["payload"]["corrected"] is True and second["payload"]["correction"]["mark"] == ""
