"""The engine skeleton every simulated kind shares: routing, the fault switch, the
`/_sim/*` control plane, paced streaming, engine death and background traffic.

The `/_sim/*` endpoints stay answerable under every fault (including `hang`), so a test
or the supervisor can always clear a fault or read the send log.
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import string
import time

from . import traffic
from .core import FAULT_KINDS, EngineConfig, Plan, PrefixCache, SendLog, sleep_until
from .http import BadRequest, HTTPServer, Request, Response, json_response

GARBAGE_METRICS = b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>\n<h1>Bad Gateway</h1>\x00\xff not prometheus {{{ \n"


def request_id(prefix="chatcmpl-", n=32) -> str:
    alphabet = string.ascii_letters + string.digits
    return prefix + "".join(secrets.choice(alphabet) for _ in range(n))


class BaseEngine:
    kind = "openai"
    server_header = "uvicorn"
    date_header = True
    extra_headers: tuple = ()
    listen_while_loading = True  # llama.cpp/SGLang listen during load; vLLM does not
    max_running = 256

    def __init__(self, cfg: EngineConfig, *, log=None, on_exit=None) -> None:
        self.cfg = cfg
        self.log_sink = log
        self.on_exit = on_exit
        self.rng = random.Random(cfg.seed or cfg.name)
        self.fault: str | None = None
        self.fault_args: dict = {}
        self.dead = False
        self.started_at = time.time()
        self.ready_at = time.monotonic() + cfg.load_seconds
        self.cache = PrefixCache(cfg.num_gpu_blocks, cfg.block_size)
        self.sendlog = SendLog()
        self.unhung = asyncio.Event()
        self.unhung.set()
        self.slots = asyncio.Semaphore(self.max_running)
        self.running = 0
        self.decoding = 0  # streams inside paced(): the shared aggregate_cap is split between them
        self.waiting = 0
        self.inflight_tokens = 0
        self._synthetic: list[tuple[float, int]] = []  # (end time, kv tokens) of fake requests
        self.server = HTTPServer(
            self.handle,
            server_header=self.server_header,
            extra_headers=self.extra_headers,
            date_header=self.date_header,
        )
        self._tasks: list[asyncio.Task] = []
        self.exit_code: asyncio.Future = asyncio.get_running_loop().create_future()

    # ---- lifecycle -------------------------------------------------------------------
    async def start(self) -> int:
        self.boot_log()
        if not self.listen_while_loading:
            await sleep_until(self.ready_at)
        port = await self.server.start(self.cfg.host, self.cfg.port)
        self.cfg.port = port
        self._tasks.append(asyncio.create_task(self._after_load()))
        if self.cfg.background_rps > 0:
            self._tasks.append(asyncio.create_task(self._background()))
        return port

    async def _after_load(self) -> None:
        await sleep_until(self.ready_at)
        self.ready_log()

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        await self.server.close()

    @property
    def loading(self) -> bool:
        return time.monotonic() < self.ready_at

    @property
    def url(self) -> str:
        return f"http://{self.cfg.host}:{self.cfg.port}"

    def log(self, line: str) -> None:
        if self.log_sink:
            self.log_sink(line)

    # hooks for kinds
    def boot_log(self) -> None: ...
    def ready_log(self) -> None: ...
    def fatal_log(self, kind: str) -> None: ...
    def routes(self) -> dict:
        return {}

    def not_found(self, req: Request) -> Response:
        return json_response({"detail": "Not Found"}, 404)

    def account(self, plan: Plan, *, synthetic: bool) -> None: ...
    def loading_response(self, req: Request) -> Response | None:
        return None

    # ---- dispatch --------------------------------------------------------------------
    async def handle(self, req: Request) -> Response | None:
        if req.path.startswith("/_sim/"):
            return await self.sim_route(req)
        if self.fault == "hang":
            await asyncio.Event().wait()  # accept, read, never answer
        if self.fault == "slow":
            await asyncio.sleep(float(self.fault_args.get("seconds", self.cfg.slow_seconds)))
        if self.fault == "http500":
            return Response(500, b"Internal Server Error", "text/plain; charset=utf-8")
        if self.loading and (early := self.loading_response(req)) is not None:
            return early
        if self.fault == "garbage_metrics" and req.path == "/metrics":
            return Response(200, GARBAGE_METRICS, "text/html; charset=utf-8")
        route = self.routes().get((req.method, req.path))
        if route is None:
            return self.not_found(req)
        try:
            resp = await route(req)
        except BadRequest as exc:
            resp = self.bad_request(str(exc))
        self.access_log(req, resp)
        return resp

    def access_log(self, req: Request, resp: Response | None) -> None:
        """The engine's line for one answered request (vLLM: uvicorn's access line); None: streamed."""

    def bad_request(self, message: str) -> Response:
        return json_response(
            {"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}}, 400
        )

    # ---- control plane ---------------------------------------------------------------
    async def sim_route(self, req: Request) -> Response:
        if req.path == "/_sim/state" and req.method == "GET":
            return json_response(self.state())
        if req.path == "/_sim/sendlog" and req.method == "GET":
            return json_response(self.sendlog.as_json())
        if req.path == "/_sim/traffic" and req.method == "POST":
            try:
                return json_response(traffic.inject(self, traffic.parse(req.json())))
            except BadRequest as exc:
                return json_response({"error": str(exc)}, 400)
        if req.path == "/_sim/fault" and req.method == "POST":
            try:
                return self.set_fault(req.json())
            except BadRequest as exc:
                return json_response({"error": str(exc)}, 400)
        return json_response({"error": f"no such control endpoint: {req.method} {req.path}"}, 404)

    def state(self) -> dict:
        return {
            "kind": self.kind,
            "name": self.cfg.name,
            "model": self.cfg.model,
            "pid": os.getpid(),
            "port": self.cfg.port,
            "fault": self.fault,
            "fault_args": self.fault_args,
            "loading": self.loading,
            "dead": self.dead,
            "running": self.running,
            "waiting": self.waiting,
        }

    def set_fault(self, body) -> Response:
        kind = body.get("kind") if isinstance(body, dict) else None
        if kind not in FAULT_KINDS:
            raise BadRequest(f"fault 'kind' must be one of {', '.join(FAULT_KINDS)}; got {kind!r}")
        if kind == "slow" and "seconds" in body and not isinstance(body["seconds"], (int, float)):
            raise BadRequest("'seconds' must be a number")
        if self.dead:
            raise BadRequest("engine is already shutting down")
        args = {k: v for k, v in body.items() if k != "kind"}
        if kind == "clear":
            self.fault, self.fault_args = None, {}
            self.unhung.set()
        elif kind in ("exit0", "crash"):
            self.die(kind)
        else:
            self.fault, self.fault_args = kind, args
            if kind == "hang":
                self.unhung.clear()
        return json_response({"ok": True, "fault": kind, "pid": os.getpid()})

    # ---- engine death ------------------------------------------------------------------
    def die(self, kind: str) -> None:
        """exit0: in-flight streams get an error chunk, /health 503, port closes, exit 0
        (vLLM after EngineCore death). crash: connections drop, exit 1."""
        self.fault, self.dead = kind, True
        self.unhung.set()
        self.fatal_log(kind)
        loop = asyncio.get_running_loop()
        if kind == "crash":
            loop.call_later(0.05, self._exit, 1)
        else:
            loop.call_later(self.cfg.exit_delay * 0.8, lambda: asyncio.ensure_future(self.server.close()))
            loop.call_later(self.cfg.exit_delay, self._exit, 0)

    def _exit(self, code: int) -> None:
        if not self.exit_code.done():
            self.exit_code.set_result(code)
        if self.on_exit:
            self.on_exit(self, code)

    # ---- admission and pacing ----------------------------------------------------------
    async def admit(self) -> int:
        """Wait for a free sequence slot; returns a slot id for release()."""
        self.waiting += 1
        try:
            await self.slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        return 0

    def release(self, slot: int) -> None:
        self.running -= 1
        self.slots.release()

    async def paced(self, stream, plan: Plan, t0: float, chunk_fn, rid: str) -> str:
        """Send plan.completion_tokens tokens, chunk k at t0 + k*tpc/rate (absolute
        schedule). When behind (high rates), every chunk already due goes out in one
        write. With aggregate_cap the rate is min(rate, cap / streams decoding) and the
        schedule is re-anchored at the chunk due when that share changes.
        Returns 'ok', 'gone' (client left) or 'dead' (engine died)."""
        self.decoding += 1
        try:
            return await self._paced(stream, plan, t0, chunk_fn, rid)
        finally:
            self.decoding -= 1

    def stream_rate(self) -> float:
        cap = self.cfg.aggregate_cap
        return min(self.cfg.rate, cap / max(1, self.decoding)) if cap > 0 else self.cfg.rate

    async def _paced(self, stream, plan: Plan, t0: float, chunk_fn, rid: str) -> str:
        n, rate, tpc = plan.completion_tokens, self.stream_rate(), self.cfg.tokens_per_chunk
        log = self.sendlog.begin(rid, t0, rate, tpc)
        i, anchor_t, anchor_i = 0, t0, 0
        while i < n:
            share = self.stream_rate()
            if share != rate:
                anchor_t, anchor_i, rate = anchor_t + (i - anchor_i) / rate, i, share
            await sleep_until(anchor_t + (i - anchor_i) / rate)
            if not self.unhung.is_set():
                await self.unhung.wait()
            if self.dead:
                return "dead"
            now = time.monotonic()
            parts: list[bytes] = []
            counts: list[int] = []
            while i < n and (not parts or anchor_t + (i - anchor_i) / rate <= now):
                cnt = min(tpc, n - i)
                parts.append(chunk_fn(i, cnt))
                counts.append(cnt)
                i += cnt
            sent_at = time.monotonic()
            if not stream.send(b"".join(parts)):
                return "gone"
            log.extend((sent_at, c) for c in counts)
            if not await stream.drain():
                return "gone"
        return "ok"

    async def wait_generation(self, plan: Plan, t0: float) -> bool:
        """Non-streaming: wait as long as generating would take. False if the engine died."""
        await sleep_until(t0 + plan.completion_tokens / self.cfg.rate)
        if not self.unhung.is_set():
            await self.unhung.wait()
        return not self.dead

    def ttft(self, prompt: int, cached: int) -> float:
        return self.cfg.ttft + (prompt - cached) / self.cfg.prefill_rate

    # ---- synthetic traffic ---------------------------------------------------------------
    def kv_usage(self) -> float:
        now = time.monotonic()
        self._synthetic = [s for s in self._synthetic if s[0] > now]
        used = self.inflight_tokens + sum(t for _, t in self._synthetic)
        return min(1.0, used / max(1, self.cfg.kv_tokens))

    def synthetic_running(self) -> int:
        now = time.monotonic()
        return sum(1 for end, _ in self._synthetic if end > now)

    async def _background(self) -> None:
        """Fake requests so counters move in demo mode without clients."""
        while True:
            await asyncio.sleep(self.rng.expovariate(self.cfg.background_rps))
            if self.dead or self.loading or self.fault == "hang":
                continue
            self.account(self.synthetic_plan(), synthetic=True)

    def synthetic_plan(self) -> Plan:
        bs = self.cfg.block_size
        prompt = self.rng.randint(200, 4000)
        hit = 0.0 if self.fault == "cache_drop" else min(1.0, max(0.0, self.rng.gauss(self.cfg.prefix_hit_rate, 0.03)))
        cached = min((prompt - 1) // bs, int(prompt * hit) // bs) * bs
        completion = self.rng.randint(20, 400)
        plan = Plan(prompt, cached, completion, 0, "stop", self.ttft(prompt, cached), True, True)
        self._synthetic.append((time.monotonic() + completion / self.cfg.rate, prompt + completion))
        return plan
