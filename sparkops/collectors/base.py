"""What every engine collector shares: fetch a few endpoints concurrently, turn the
bodies into a `Snapshot` (raw instantaneous values and counters), never raise.

Derived values (rates, hit rate over a window, latency quantiles, restarts) need the
previous poll and live in sparkops/collectors/derive.py, the same for every engine."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from urllib.parse import urlsplit

from dashboard import http

if TYPE_CHECKING:
    from sparkops.collectors.prom import Samples

REGISTRY: dict[str, EngineCollector] = {}
C = TypeVar("C", bound="type[EngineCollector]")
# An endpoint's answer in one fetch: its response, or what went wrong.
Answer = http.Response | http.HttpError


def register(cls: C) -> C:
    REGISTRY[cls.kind] = cls()
    return cls


def collector_for(kind: str) -> EngineCollector:
    try:
        return REGISTRY[kind]
    except KeyError:
        raise ValueError(f"no collector for engine kind {kind!r}") from None


@dataclass
class Snapshot:
    """One engine's answer, before any arithmetic across polls."""

    status: str = "down"  # up | loading | down
    error: str | None = None
    models: list = field(default_factory=list)
    gauges: dict = field(default_factory=dict)  # requests_running, requests_waiting, kv_cache_usage
    counters: dict = field(default_factory=dict)  # *_total, monotonic until a restart
    hists: dict = field(default_factory=dict)  # ttft / itl: {le: cumulative count}
    kv: dict = field(default_factory=dict)  # pool_tokens, window, memory_share, kv_memory_bytes, concurrency
    info: dict = field(default_factory=dict)  # version, build... shown, not charted
    contract: dict = field(default_factory=dict)  # finished requests by reason, prompt and e2e histograms (contract.py)
    # The engine's own account of how it runs (its window, model, version, cache config: what
    # sparkops/launch/ versions), read when every slow endpoint was; else None.
    account: dict | None = None

    @property
    def up(self) -> bool:
        return self.status == "up"


def describe(exc: BaseException) -> str:
    """The reason shown on the engine card, e.g. 'connection refused'."""
    return exc.reason if isinstance(exc, http.HttpError) else f"{type(exc).__name__}: {exc}"


def describe_at(exc: BaseException) -> str:
    """The reason with the endpoint it came from, e.g. '/metrics: response is not UTF-8 text'."""
    path = urlsplit(exc.url).path if isinstance(exc, http.HttpError) and exc.url else ""
    return f"{path}: {describe(exc)}" if path else describe(exc)


class Bodies(dict[str, Answer]):
    """{endpoint name: Response or HttpError} of one fetch, and the problems met reading the
    optional ones ({endpoint name: reason}), which an engine that is up still shows as its reason."""

    def __init__(self, items: Iterable[tuple[str, Answer]] = ()) -> None:
        super().__init__(items)
        self.problems: dict[str, str] = {}
        self.retry: set[str] = set()  # those of them a retry may mend (a timeout, not a bad body)


class EngineCollector:
    kind = ""
    liveness_path = "/health"
    # name -> path; "metrics" (or whatever `required` names) failing means the engine is down.
    endpoints: ClassVar[dict[str, str]] = {}
    required: tuple[str, ...] = ()
    # Endpoints whose answers change only on a restart (model list, props): fetched when
    # `refresh` is asked for, their facts carried between polls — a third fewer requests.
    slow: frozenset[str] = frozenset()
    # Statuses that are answers for the liveness probe, not errors (llama.cpp 503 = loading).
    probe_ok_statuses: frozenset[int] = frozenset()

    # A server that gives each connection a thread of its own for as long as it is kept alive
    # (llama.cpp's cpp-httplib) is read over one connection, its endpoints in turn: see `_in_turn`.
    one_connection: bool = False

    async def fetch(self, client: http.AsyncClient, base_url: str, *, timeout: float, refresh: bool = True) -> Bodies:
        names = [n for n in self.endpoints if refresh or n not in self.slow]
        if self.one_connection:
            results = await self._in_turn(client, base_url, names, timeout)
        else:
            gathered = await asyncio.gather(
                *(
                    http.aget(client, base_url + self.endpoints[n], timeout=timeout, ok_statuses=self.ok_statuses(n))
                    for n in names
                ),
                return_exceptions=True,
            )
            results = [_answer(res, base_url + self.endpoints[n]) for n, res in zip(names, gathered)]
        return Bodies(zip(names, results))

    async def _in_turn(self, client: http.AsyncClient, base_url: str, names: list[str], timeout: float) -> list[Answer]:
        """NAMES one after another, so the poll holds one keep-alive connection, not one per
        endpoint, and all of them within TIMEOUT, as the concurrent fetch is.

        cpp-httplib serves a connection on one pool thread until it has been idle for its
        keep-alive (5 s), so every connection a poller keeps pins a thread of llama-server's
        (an older build's pool is fixed: max(parallel + 2, cores - 1)). A newer build adds a
        thread only when none is idle at the moment a connection is queued, and counts a
        thread idle until it has woken, so a burst of new connections can queue behind
        threads that idle keep-alives hold. With the five endpoints fetched at once, the
        real-engine needle test's first poll (tests/realengine/test_needle.py, after the
        other real-engine tests' clients) read /health, /metrics and /slots and timed out on
        /props and /v1/models in 7 of 14 runs; in turn, in none of 11. One connection at a
        time is always served: by the idle thread, or by a new one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        results: list[http.Response | http.HttpError] = []
        for name in names:
            url = base_url + self.endpoints[name]
            left = deadline - loop.time()
            if left <= 0:  # the poll's time is spent: not asked
                results.append(http.Timeout("timed out (total)", url=url))
                continue
            try:
                results.append(await http.aget(client, url, timeout=left, ok_statuses=self.ok_statuses(name)))
            except http.HttpError as exc:
                results.append(exc)
        return results

    def ok_statuses(self, name: str) -> frozenset[int] | None:  # noqa: ARG002 (kinds override it per endpoint)
        return None

    def snapshot(self, bodies: Mapping[str, Answer]) -> Snapshot:
        """Turn fetched bodies into a Snapshot; a bad body is a down engine with its reason."""
        for name in self.required:
            res = bodies.get(name)
            if isinstance(res, http.HttpError):
                return Snapshot(status="down", error=f"{name}: {describe(res)}")
        try:
            snap = self.parse(bodies)
        except http.HttpError as exc:
            return Snapshot(status="down", error=describe_at(exc))
        problems = bodies.problems if isinstance(bodies, Bodies) else {}
        snap.info["problems"] = dict(problems)
        snap.info["retry"] = sorted(bodies.retry) if isinstance(bodies, Bodies) else []
        if snap.up and not snap.error and problems:
            snap.error = "; ".join(problems.values())
        return snap

    def parse(self, bodies: Mapping[str, Answer]) -> Snapshot:  # pragma: no cover - abstract
        raise NotImplementedError

    def account_of(self, bodies: Mapping[str, Answer], samples: Samples | None = None) -> dict[str, Any]:  # noqa: ARG002 (kinds override it)
        """The engine's account of itself from BODIES (a fetch that read every slow endpoint)
        and SAMPLES (its parsed /metrics, when it has them). An engine kind that says nothing
        about how it runs has none: {}."""
        return {}

    def complete(self, bodies: Mapping[str, Answer]) -> bool:
        """Whether BODIES hold every slow endpoint (a refresh), so the account can be read."""
        return self.slow <= bodies.keys()

    # -- helpers for subclasses ----------------------------------------------------
    @staticmethod
    def json_of(bodies: Mapping[str, Answer], name: str, default: Any = None) -> Any:
        """The JSON body of an optional endpoint, or `default` if it failed or is not JSON (and
        then what was wrong with it is among the bodies' problems)."""
        res = bodies.get(name)
        if res is None:
            return default
        kept = bodies if isinstance(bodies, Bodies) else None  # a plain dict keeps no problems
        if isinstance(res, http.HttpError):
            if kept is not None and not isinstance(res, http.HttpStatus):  # 404: an older build lacks it
                kept.problems[name] = describe_at(res)
                if not res.permanent:
                    kept.retry.add(name)
            return default
        try:
            return res.json()
        except http.HttpError as exc:
            if kept is not None:
                kept.problems[name] = describe_at(exc)
            return default

    @staticmethod
    def openai_models(payload: object) -> tuple[list[str], int | None]:
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list):
            return [], None
        models = [str(card.get("id")) for card in data if isinstance(card, dict) and card.get("id")]
        windows = [card.get("max_model_len") for card in data if isinstance(card, dict)]
        windows = [w for w in windows if type(w) is int and w > 0]  # JSON true is an int to isinstance
        return models, (windows[0] if windows else None)


def answered(bodies: Mapping[str, Answer], name: str) -> http.Response:
    """A required endpoint's response: `snapshot` saw it answer; its HttpError is raised otherwise
    (and `snapshot` reads that as the engine down, with the reason)."""
    res = bodies[name]
    if isinstance(res, http.HttpError):
        raise res
    return res


def _answer(res: http.Response | BaseException, url: str) -> Answer:
    """One gathered result as an endpoint's answer. Anything but an HttpError is a bug, not an
    engine's fault: it surfaces; a request cancelled on its own (not the poll) got no answer."""
    if isinstance(res, asyncio.CancelledError):
        return http.HttpError("request cancelled", url=url)
    if isinstance(res, BaseException) and not isinstance(res, http.HttpError):
        raise res
    return res


def as_int(value: object) -> int | None:
    try:
        number = float(str(value).replace(",", ""))
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) else None


def as_float(value: object) -> float | None:
    if not isinstance(value, (int, float, str)):  # None, a list, a dict: no number
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
