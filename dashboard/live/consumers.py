"""The live WebSocket: signed-in users join the fan-out group; anonymous ones are refused."""
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from .events import GROUP_ALL


class LiveConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        await self.channel_layer.group_add(GROUP_ALL, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        await self.channel_layer.group_discard(GROUP_ALL, self.channel_name)

    async def live_event(self, message):
        await self.send_json(message["event"])
