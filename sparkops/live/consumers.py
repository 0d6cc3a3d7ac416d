"""The live WebSocket.

Anonymous sockets are refused. A signed-in socket joins `GROUP_ALL` plus the groups its
page names in the query string (`?groups=overview,engine.3`, `?groups=fleet` for the Hosts
grid); nothing else can be joined.
Every event is the same for every role: none carries write controls (a page that shows them,
the alert list, fetches that part again over HTTP, where the template knows the role).

While open, a socket keeps the viewer-presence key alive (presence.py): with no socket open
anywhere, the poller renders and sends no samples at all."""

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from dashboard.livebus import GROUP_ALL, GROUP_FLEET, GROUP_OVERVIEW, engine_group, host_group
from dashboard.models import Engine, Host
from dashboard.roles import role_of

from .presence import refresh_s, sockets

MAX_GROUPS = 16


@database_sync_to_async
def _subject_groups(names: Sequence[str]) -> list[str]:
    wanted: dict[str, set[int]] = {"engine": set(), "host": set()}
    groups: set[str] = set()
    for name in names[:MAX_GROUPS]:
        kind, _, ident = name.partition(".")
        if name == "overview":
            groups.add(GROUP_OVERVIEW)
        elif name == "fleet":
            groups.add(GROUP_FLEET)
        elif kind in wanted and ident.isdigit():
            wanted[kind].add(int(ident))
    groups |= {engine_group(i) for i in Engine.objects.filter(id__in=wanted["engine"]).values_list("id", flat=True)}
    groups |= {host_group(i) for i in Host.objects.filter(id__in=wanted["host"]).values_list("id", flat=True)}
    return sorted(groups)


class LiveConsumer(AsyncJsonWebsocketConsumer):
    groups_joined: Sequence[str] = ()
    _presence_task: "asyncio.Future[None] | None" = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.role = await database_sync_to_async(role_of)(user)
        if self.role is None:  # an inactive account
            await self.close(code=4403)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        names = [n for v in query.get("groups", []) for n in v.split(",") if n]
        self.groups_joined = [GROUP_ALL, *await _subject_groups(names)]
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        # Marked before the hello: a page told it is live gets samples within the poller's presence
        # cache (2 s) plus a poll interval; a poller in this process sees it at once.
        await asyncio.to_thread(sockets.mark, opened=True)
        self._presence_task = asyncio.ensure_future(self._keep_present())
        await self.accept()
        await self.send_json({"type": "live.hello", "payload": {"groups": self.groups_joined, "role": self.role}})

    async def disconnect(self, code: int) -> None:  # noqa: ARG002 (Channels' signature)
        if self._presence_task is not None:
            self._presence_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._presence_task
            self._presence_task = None
            sockets.forget()
        for group in self.groups_joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def _keep_present(self) -> None:
        while True:
            await asyncio.sleep(refresh_s())
            await asyncio.to_thread(sockets.mark)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """The socket is one-way; a ping gets a pong so the client can detect a dead link."""
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong", "payload": {}})

    async def live_event(self, message: dict[str, Any]) -> None:
        event = message["event"]
        await self.send_json({"type": event["type"], "payload": event["payload"]})
