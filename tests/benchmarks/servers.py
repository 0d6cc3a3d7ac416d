"""A tiny scripted HTTP/SSE server on 127.0.0.1 for the failure shapes the simulated
engines do not produce (malformed chunks, empty streams, 429, non-SSE answers)."""

import asyncio
import json

CHUNK = {"id": "x", "object": "chat.completion.chunk", "model": "m"}


def sse(obj):
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def delta_chunk(**delta):
    return sse({**CHUNK, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})


def finish_chunk(reason="length"):
    return sse({**CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})


def usage_chunk(completion, prompt=10, cached=0, reasoning=None):
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return sse({**CHUNK, "choices": [], "usage": usage})


class ScriptedServer:
    """`script(body) -> (status, content_type, [byte parts], close_early)` decides each answer."""

    def __init__(self, script, *, part_delay=0.0):
        self.script, self.part_delay, self.bodies = script, part_delay, []
        self.server = None

    async def start(self):
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return self

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def close(self):
        self.server.close()

    async def handle(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode().split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                body = json.loads(await reader.readexactly(length)) if length else {}
                path = head.split(b" ")[1].decode()
                if not path.startswith("/v1/chat"):
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                self.bodies.append(body)
                status, ctype, parts, close_early = self.script(body)
                if not await self.answer(writer, status, ctype, parts, close_early):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def answer(self, writer, status, ctype, parts, close_early):
        if ctype != "text/event-stream":
            payload = b"".join(parts)
            writer.write(
                b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
                % (status, ctype.encode(), len(payload))
                + payload
            )
            await writer.drain()
            return True
        writer.write(
            b"HTTP/1.1 %d OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" % status
        )
        for part in parts:
            writer.write(b"%x\r\n%s\r\n" % (len(part), part))
            await writer.drain()
            if self.part_delay:
                await asyncio.sleep(self.part_delay)
        if close_early:
            return False
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True
