"""The Hosts grid's live deltas: the fleet's leader judges every box and engine once a poll
interval (`selectors.fleet`) and sends what changed since it last looked, in one small
"fleet.delta" event to `GROUP_FLEET`: a changed box's tile fields, a changed engine's chip.

Why the leader, not each box's worker: a box goes stale or unreachable by *not* reporting,
so no event of its own can say so; the leader already runs the upkeep that judges silence.
Why deltas, not cards: at 50 boxes × 3 engines the grid would otherwise be re-sent every tick
for a change or two (the engine cards are ~3 KB each; a chip's change is ~80 bytes).

Coalesced by the tick (at most one event per interval, whatever changed); with nothing changed
a heartbeat every HEARTBEAT_S says the watcher is alive, so the page can tell quiet from dead.
With no viewer anywhere (presence.py) nothing is read; the first tick after one appears sends
every tile and chip, so a page that loaded meanwhile is never left behind."""

import time
from collections import Counter
from concurrent.futures import Future

from django.utils import timezone

from dashboard.livebus import GROUP_FLEET, LiveEvent, publish
from dashboard.selectors.fleet import Tile, fleet_tiles

from .presence import Viewers

HEARTBEAT_S = 10.0  # fleet.js calls the grid stale after 3 of these without a word

# {"tiles": {host pk: tile fields}, "chips": {engine pk: chip fields}}; the pks as text, as JSON and
# the channel layer's msgpack (which refuses int keys) carry them.
Shown = dict[str, dict[str, dict]]


def fleet_shown(tiles: list[Tile]) -> Shown:
    """What a page shows of TILES, keyed as the deltas are."""
    return {
        "tiles": {str(t.id): t.delta() for t in tiles},
        "chips": {str(c.id): {"state": c.state, "word": c.word, "title": c.title} for t in tiles for c in t.chips},
    }


def fleet_delta(before: Shown | None, after: Shown) -> dict:
    """The tiles and chips of AFTER that differ from BEFORE (all of them when BEFORE is None);
    "layout": a box or engine came or went, so the page fetches its grid again. A chip's title
    (the status reason, often a changing error text) alone sends nothing."""
    if before is None:
        return {**after, "layout": False}
    tiles = {pk: t for pk, t in after["tiles"].items() if before["tiles"].get(pk) != t}
    old = before["chips"]
    chips = {
        pk: c
        for pk, c in after["chips"].items()
        if pk not in old or (old[pk]["state"], old[pk]["word"]) != (c["state"], c["word"])
    }
    layout = before["tiles"].keys() != after["tiles"].keys() or old.keys() != after["chips"].keys()
    return {"tiles": tiles, "chips": chips, "layout": layout}


class FleetWatch:
    """The leader's "live-fleet" duty (schedule.resident_duties): `tick()` once a poll interval.
    What it last sent lives here (`shown`); `stats` counts "sent", "quiet" and "skipped" ticks."""

    def __init__(self, *, heartbeat_s: float = HEARTBEAT_S, viewers: Viewers | None = None) -> None:
        """VIEWERS: whose answer to "is a page open?" to share (the poller's live publisher asks the
        same question every tick: one Redis read serves both)."""
        self.shown: Shown | None = None
        self.viewers = viewers if viewers is not None else Viewers()
        self.heartbeat_s = heartbeat_s
        self.sent_at = float("-inf")
        self.stats: Counter[str] = Counter()

    def tick(self) -> "Future[None] | None":
        """Judge the fleet, send what changed (or a heartbeat when due); the future of the send, or None."""
        if not self.viewers.present():
            self.shown = None  # a viewer who comes back gets everything again
            self.stats["skipped"] += 1
            return None
        shown = fleet_shown(fleet_tiles())
        delta = fleet_delta(self.shown, shown)
        self.shown = shown
        changed = delta["tiles"] or delta["chips"] or delta["layout"]
        if not changed and time.monotonic() - self.sent_at < self.heartbeat_s:
            self.stats["quiet"] += 1
            return None
        self.sent_at = time.monotonic()
        self.stats["sent"] += 1
        return publish(GROUP_FLEET, LiveEvent(type="fleet.delta", payload={**delta, "at": timezone.now().isoformat()}))
