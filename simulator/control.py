"""The supervisor's loopback control API:

GET  /_sim/units                         [{name, kind, url, unit, port, pid, state, ...}]
POST /_sim/units/<name>/start|stop|restart|reset-failed   (start/restart: 409 past the start limit)
POST /_sim/units/<name>/fault  {"kind": K, ...}   forwarded to the engine
POST /_sim/units/<name>/traffic {"count": N, "finish_reason": ..., "e2e_s": ..., "status": ..., ...}
                               finished requests in the engine's metrics and log (simulator/traffic.py)
POST /_sim/units/<name>/dropin {"name": "30-x.conf", "text": "[Service]\n...", "reload": true}  write a
                               drop-in (text "" or null: remove it) and daemon-reload (unless reload is
                               false: then show says NeedDaemonReload=yes and a start runs the loaded unit)
POST /_sim/daemon-reload       every unit's files loaded again (`systemctl daemon-reload`)
POST /_sim/units/<name>/cold   the JIT cache is gone: the next start is cold (cold_seconds longer,
                               MAX_JOBS compilers — nproc + 2 uncapped — in the simulated /proc)
POST /_sim/gpu   {"fault": "clock_stuck_low" | "clear"}
POST /_sim/host  {"fault": "memory_pressure" | "clear"}
POST /_sim/kernel {"message": "...", "priority": 3}
"""

from __future__ import annotations

import asyncio
import json
import signal
from typing import TYPE_CHECKING

from .core import FAULT_KINDS
from .host import GPU_FAULTS, HOST_FAULTS
from .http import BadRequest, HTTPServer, Request, Response, json_response
from .units import write_dropin

if TYPE_CHECKING:
    from .service import Unit


class ControlAPI:
    def __init__(self, sup) -> None:
        self.sup = sup
        self.server = HTTPServer(self.handle, server_header="sparkops-sim")

    async def start(self, port: int = 0) -> int:
        return await self.server.start("127.0.0.1", port)

    async def handle(self, req: Request) -> Response:
        try:
            return await self.route(req)
        except BadRequest as exc:
            return json_response({"error": str(exc)}, 400)

    async def route(self, req: Request) -> Response:
        parts = req.path.strip("/").split("/")
        if req.method == "GET" and parts == ["_sim", "units"]:
            return json_response([u.info() for u in self.sup.units.values()])
        if req.method != "POST":
            return json_response({"error": f"no such endpoint: {req.method} {req.path}"}, 404)
        if len(parts) == 4 and parts[:2] == ["_sim", "units"]:
            unit = self.sup.units.get(parts[2])
            if unit is None:
                return json_response({"error": f"unknown engine {parts[2]!r}"}, 404)
            return await self.unit_action(unit, parts[3], req)
        if parts == ["_sim", "daemon-reload"]:
            for unit in self.sup.units.values():
                unit.reload()
                unit.write()
            return json_response({"ok": True})
        if parts == ["_sim", "gpu"]:
            fault = self.choice(req, "fault", GPU_FAULTS)
            self.sup.host.set_gpu_fault(fault)
            return json_response({"ok": True, "gpu": self.sup.host.gpu})
        if parts == ["_sim", "host"]:
            fault = self.choice(req, "fault", HOST_FAULTS)
            self.sup.host.host_fault = None if fault == "clear" else fault
            return json_response({"ok": True, "host_fault": self.sup.host.host_fault})
        if parts == ["_sim", "kernel"]:
            body = self.body(req)
            if not isinstance(body.get("message"), str) or not body["message"]:
                raise BadRequest("'message' must be a non-empty string")
            self.sup.journal.kernel(body["message"], int(body.get("priority", 3)))
            return json_response({"ok": True})
        return json_response({"error": f"no such endpoint: {req.method} {req.path}"}, 404)

    def body(self, req: Request) -> dict:
        body = req.json()
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        return body

    def choice(self, req: Request, key: str, allowed: tuple[str, ...]) -> str:
        value = self.body(req).get(key)
        if not isinstance(value, str) or value not in allowed:
            raise BadRequest(f"'{key}' must be one of {', '.join(allowed)}; got {value!r}")
        return value

    async def unit_action(self, unit: Unit, action: str, req: Request):
        from .supervisor import STARTED_TOO_OFTEN, StartLimitHit

        if action in ("start", "restart"):
            try:
                await (self.sup.start_unit(unit) if action == "start" else self.sup.restart_unit(unit))
            except StartLimitHit:
                return json_response({"error": STARTED_TOO_OFTEN, **unit.info()}, 409)
        elif action == "stop":
            await self.sup.stop_unit(unit)
        elif action == "reset-failed":
            self.sup.reset_failed(unit)
        elif action == "fault":
            return await self.fault(unit, self.body(req))
        elif action == "traffic":
            return await self.forward(unit, "/_sim/traffic", self.body(req))
        elif action == "cold":  # a driver bump or a system update emptied the JIT cache
            unit.cold_next = True
        elif action == "dropin":
            body = self.body(req)
            text = body.get("text")
            if not isinstance(body.get("name"), str) or (text is not None and not isinstance(text, str)):
                raise BadRequest("'name' must be a drop-in file name and 'text' a string (or null to remove it)")

            try:
                write_dropin(self.sup.root, unit.id, body["name"], text)
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
            if body.get("reload", True) is not False:
                unit.reload()
                unit.write()
        else:
            return json_response(
                {
                    "error": f"unknown action {action!r}; use start, stop, restart, reset-failed, fault, traffic, cold or dropin"
                },
                404,
            )
        return json_response(unit.info())

    async def forward(self, unit: Unit, path: str, body):
        if unit.proc is None:
            return json_response({"error": f"{unit.id} is not running"}, 409)
        try:
            status, answer = await post_json(unit.spec.port, path, body, timeout=5.0)
        except (TimeoutError, OSError, ValueError):
            return json_response({"error": f"engine {unit.spec.name} did not answer"}, 504)
        return json_response(answer, status)

    async def fault(self, unit: Unit, body):
        kind = body.get("kind")
        if kind not in FAULT_KINDS:
            raise BadRequest(f"fault 'kind' must be one of {', '.join(FAULT_KINDS)}; got {kind!r}")
        if unit.proc is None:
            return json_response({"error": f"{unit.id} is not running"}, 409)
        try:
            status, answer = await post_json(unit.spec.port, "/_sim/fault", body, timeout=2.0)
            return json_response(answer, status)
        except (TimeoutError, OSError, ValueError):
            # engine unreachable: deliver the deaths by signal (SIGTERM exits 0, SIGKILL crashes)
            if kind in ("exit0", "crash"):
                self.sup.signal_unit(unit, signal.SIGTERM if kind == "exit0" else signal.SIGKILL)
                return json_response({"ok": True, "fault": kind, "delivered": "signal"})
            return json_response({"error": f"engine {unit.spec.name} did not answer"}, 504)


async def post_json(port: int, path: str, obj, timeout: float = 2.0):
    """Tiny HTTP/1.1 client (no Django, no extra event-loop clients in the supervisor)."""

    async def go():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        body = json.dumps(obj).encode()
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        data = await reader.read()
        writer.close()
        head, _, payload = data.partition(b"\r\n\r\n")
        return int(head.split(b" ")[1]), json.loads(payload)

    return await asyncio.wait_for(go(), timeout)
