"""The fleet at a glance: each box's state and its engines' states, as the Hosts page's grid and
the live view's deltas show them (issue 48).

A box is judged by the same limits that page and refuse work for it (`poller.fleet`):
- unreachable: its worker has not stored a report within collector_stale's limit (the rule
  pages it; the controls refuse its restarts);
- stale: a store is overdue (one poll interval past the store interval) but not yet that limit;
- clock skewed: it reports on time, but its worker's clock is off the database's by more than
  SPARKOPS_CLOCK_SKEW_MAX_S (`clock.skew_text`, what the clock_skew rule fires on);
- ok; or "no worker" for a box none has reported from (a remote endpoint's: its engines are
  adopted and paged as usual, and collector_stale says nothing of it).

An engine whose reading is older than the engine list's staleness limit has no state now: on
an unreachable box it is "unknown" (the box's page stands for it), elsewhere "stale"."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models.fields.json import KT
from django.utils import timezone

from dashboard.clock import db_now, report_limit, report_overdue, skew_limit_s
from dashboard.dbgate import database_back_at
from dashboard.engine_lifecycle import reading_stale_after_s
from dashboard.models import Engine, Host
from sparkops.alerts.rules.host import stale_limit

# Problems first: the tile's rank is its worst part's (lower sorts first).
BOX_RANK = {"unreachable": 0, "stale": 2, "skewed": 3, "ok": 9, "none": 9}
ENGINE_RANK = {"down": 1, "unknown": 2, "stale": 2, "loading": 4, "up": 9, "off": 9}
BOX_WORD = {"unreachable": "unreachable", "stale": "stale", "skewed": "clock skewed", "ok": "ok", "none": "no worker"}


@dataclass(frozen=True)
class Chip:
    """One engine on its box's tile: STATE a CSS class, WORD what it says, TITLE why; LABEL its name
    without its box's ("box-07-vllm" on box-07's tile reads "vllm": 150 names fit a screen)."""

    id: int
    name: str
    state: str
    word: str
    title: str
    label: str


@dataclass(frozen=True)
class Tile:
    """One box: its STATE (BOX_WORD's keys), the WORD and DETAIL it shows, its engines' chips,
    and its RANK among the tiles (lower: a worse problem, shown first)."""

    id: int
    name: str
    state: str
    word: str
    detail: str
    rank: int
    chips: tuple[Chip, ...]

    def delta(self) -> dict:
        """What the live view sends when this tile changes (its chips go on their own)."""
        return {"state": self.state, "word": self.word, "detail": self.detail, "rank": self.rank}


@dataclass(frozen=True)
class Limits:
    """One reading of the clock and the limits a fleet is judged by, shared by every tile."""

    now: datetime
    late: timedelta
    unreachable: timedelta
    back: datetime | None

    @classmethod
    def read(cls) -> "Limits":
        # The reports are stamped with the database's clock: judge them by it.
        return cls(now=db_now(), late=report_limit(1), unreachable=stale_limit(), back=database_back_at())


def _hhmm(at: datetime) -> str:
    return timezone.localtime(at).strftime("%H:%M:%S")


def box_state(reported: datetime | None, offset_s: float | None, limits: Limits) -> tuple[str, str]:
    """(state, detail) of a box whose worker last reported at REPORTED with its clock OFFSET_S
    seconds off the database's."""
    if reported is None:
        return "none", ""
    if report_overdue(reported, now=limits.now, limit=limits.unreachable, back=limits.back):
        return "unreachable", f"since {_hhmm(reported)}"
    if report_overdue(reported, now=limits.now, limit=limits.late, back=limits.back):
        return "stale", f"report {int((limits.now - reported).total_seconds())} s old"
    if offset_s is not None and abs(offset_s) > skew_limit_s():
        return "skewed", f"{offset_s:+.0f} s off"
    return "ok", ""


def engine_chip(engine: Engine, box: str, now: datetime, *, host_name: str = "") -> Chip:
    """ENGINE's chip on a tile whose box (HOST_NAME) is in state BOX."""
    polled = engine.last_poll_at
    old = polled is None or (now - polled).total_seconds() > reading_stale_after_s(engine)
    state, title = engine.status, engine.status_reason
    if box == "unreachable" and (old or state != "up"):
        state, title = "unknown", f"its box is unreachable: last read {engine.status}"
    elif old and polled is not None:
        state, title = "stale", f"no poll since {_hhmm(polled)}: last read {engine.status}"
    elif state == "down" and not engine.expected_up:
        state, title = "off", "down, as expected (not watched for serving)"
    word = {"off": "stopped"}.get(state, state)
    label = engine.name.removeprefix(f"{host_name}-") if host_name else engine.name
    return Chip(engine.pk, engine.name, state, word, (title or word)[:200], label or engine.name)


def _offset(value) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def fleet_tiles(limits: Limits | None = None) -> list[Tile]:
    """Every box with its watched engines, problems first (then by name). Two queries and the
    limits', whatever the fleet's size: the reports' JSON stays in the database but its clock offset."""
    limits = limits or Limits.read()
    hosts = Host.objects.annotate(offset=KT("latest__clock_offset_s")).only("pk", "name", "last_report_at")
    engines = Engine.objects.filter(retired_at__isnull=True).only(
        "pk", "name", "host_id", "status", "status_reason", "last_poll_at", "poll_interval_s", "expected_up"
    )
    by_host: dict[int, list[Engine]] = {}
    for engine in engines.order_by("name"):
        by_host.setdefault(engine.host_id, []).append(engine)
    tiles = [_tile(h, by_host.get(h.pk, []), limits) for h in hosts]
    return sorted(tiles, key=lambda t: (t.rank, t.name))


def _tile(host: Host, engines: list[Engine], limits: Limits) -> Tile:
    state, detail = box_state(host.last_report_at, _offset(getattr(host, "offset", None)), limits)
    chips = tuple(engine_chip(e, state, limits.now, host_name=host.name) for e in engines)
    rank = min([BOX_RANK[state], *(ENGINE_RANK.get(c.state, 2) for c in chips)])
    return Tile(host.pk, host.name, state, BOX_WORD[state], detail, rank, chips)


def fleet_counts(tiles: list[Tile]) -> dict[str, dict[str, int]]:
    """How many boxes and engines are in each state: the page's one-line summary."""
    boxes: dict[str, int] = {}
    engines: dict[str, int] = {}
    for tile in tiles:
        boxes[tile.word] = boxes.get(tile.word, 0) + 1
        for chip in tile.chips:
            engines[chip.word] = engines.get(chip.word, 0) + 1
    return {"boxes": boxes, "engines": engines}
