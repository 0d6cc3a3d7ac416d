"""The Hosts page's grid at 50 boxes × 3 engines (issue 48, item 6): each box's state in a word
(ok, stale, unreachable, clock skewed) and its engines' chips, problems first, in a fixed number
of queries; a change makes a delta of only that change (tests/live/test_fleet_push.py sends it)."""

import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dashboard.models import Engine, Host
from dashboard.selectors.fleet import fleet_tiles
from sparkops.alerts.rules.host import stale_limit
from sparkops.live.fleet import fleet_delta, fleet_shown
from tests.fleetgrid import seed_fleet

pytestmark = pytest.mark.django_db

TILE = re.compile(r'<article class="tile box-(\w+)" id="tile-\d+" data-rank="(\d+)" data-name="([\w-]+)"')


def _tiles(html):
    return [(state, int(rank), name) for state, rank, name in TILE.findall(html)]


def _tile_html(html, name):
    start = html.index(f'data-name="{name}"')
    return html[start : html.index("</article>", start)]


def test_fifty_boxes_read_as_words_with_problems_first(viewer_client):
    seed_fleet(50)
    with CaptureQueriesContext(connection) as queries:
        html = viewer_client.get("/hosts/").content.decode()
    tiles = _tiles(html)
    assert len(tiles) == 50
    # Problems first: the two unreachable boxes, the down engine's box, the stale box, the skewed clock,
    # the loading engine's box; then the 44 that are fine, by name.
    assert [name for _, _, name in tiles[:6]] == ["box-03", "box-17", "box-30", "box-08", "box-22", "box-41"]
    fine = [name for state, _, name in tiles[6:]]
    assert fine == sorted(fine) and {s for s, _, _ in tiles[6:]} == {"ok"}
    assert {name: state for state, _, name in tiles[:6]} == {
        "box-03": "unreachable",
        "box-17": "unreachable",
        "box-30": "ok",
        "box-08": "stale",
        "box-22": "skewed",
        "box-41": "ok",
    }
    # The words, not colour alone.
    assert '<span class="box-word">unreachable</span>' in _tile_html(html, "box-03")
    assert '<span class="box-word">stale</span>' in _tile_html(html, "box-08")
    skewed = _tile_html(html, "box-22")
    assert '<span class="box-word">clock skewed</span>' in skewed and '<p class="box-detail">+10 s off</p>' in skewed
    # An unreachable box's engines are unknown, not down (the box's page stands for them).
    unreachable = _tile_html(html, "box-03")
    assert unreachable.count('<span class="chip-word">unknown</span>') == 3 and "down" not in unreachable
    down = _tile_html(html, "box-30")
    assert '<span class="chip-name">vllm-b</span><span class="chip-word">down</span>' in down  # its box's name once
    assert 'href="/engines/box-30-vllm-b/"' in down and 'href="/hosts/box-30/"' in down
    assert '<span class="chip-word">loading</span>' in _tile_html(html, "box-41")
    # The summary counts them, problems first.
    summary = html[html.index('id="fleet-summary"') : html.index('id="fleet-grid"')]
    words = re.findall(r"<b>(\d+)</b> ([\w ]+)</span>", summary)
    boxes = [("2", "unreachable"), ("46", "ok"), ("1", "stale"), ("1", "clock skewed")]
    assert words == [*boxes, ("6", "unknown"), ("142", "up"), ("1", "down"), ("1", "loading")]
    # The grid costs the same queries at 50 boxes as at 2 (none per box or engine).
    Engine.objects.exclude(host__name__in=["box-01", "box-02"]).delete()
    Host.objects.exclude(name__in=["box-01", "box-02"]).delete()
    with CaptureQueriesContext(connection) as few:
        viewer_client.get("/hosts/")
    assert len(queries) == len(few), [q["sql"][:80] for q in queries]


def test_the_grid_is_in_the_top_menu_and_joins_the_fleet_group(viewer_client):
    seed_fleet(2, problems=False)
    html = viewer_client.get("/hosts/").content.decode()
    nav = html[html.index('<nav class="mainnav">') : html.index("</nav>")]
    assert 'href="/hosts/" class="active">Hosts</a>' in nav
    assert 'id="live-root" class="fleet" data-groups="fleet" data-src="/live/fleet/"' in html
    assert "js/fleet.js" in html and "css/fleet.css" in html
    partial = viewer_client.get("/live/fleet/").content.decode()
    assert partial.count('class="tile box-ok"') == 2 and "<html" not in partial


def test_a_box_goes_stale_then_unreachable_by_the_rules_limits():
    seed_fleet(1, problems=False)
    host = Host.objects.get()
    assert fleet_tiles()[0].state == "ok"
    Host.objects.filter(pk=host.pk).update(last_report_at=timezone.now() - stale_limit() + timedelta(seconds=1))
    assert fleet_tiles()[0].state == "stale"
    Host.objects.filter(pk=host.pk).update(last_report_at=timezone.now() - stale_limit() - timedelta(seconds=1))
    tile = fleet_tiles()[0]
    assert (tile.state, tile.word) == ("unreachable", "unreachable")
    assert tile.detail.startswith("since ")
    Host.objects.filter(pk=host.pk).update(last_report_at=None)
    assert fleet_tiles()[0].word == "no worker"


def test_a_change_sends_only_that_change():
    seed = seed_fleet(50)
    before = fleet_shown(fleet_tiles())
    engine = Engine.objects.get(name="box-12-llama")
    Engine.objects.filter(pk=engine.pk).update(status="down", status_reason="connection refused")
    delta = fleet_delta(before, fleet_shown(fleet_tiles()))
    tile = next(h for h in seed["hosts"] if h.name == "box-12")
    assert set(delta["chips"]) == {str(engine.pk)} and delta["chips"][str(engine.pk)]["word"] == "down"
    assert set(delta["tiles"]) == {str(tile.pk)} and delta["tiles"][str(tile.pk)]["rank"] == 1  # it moves up
    assert delta["layout"] is False
    assert len(json.dumps(delta)) < 300
    # A reason that changes alone (an error's text) sends nothing.
    Engine.objects.filter(pk=engine.pk).update(status_reason="timed out")
    after = fleet_shown(fleet_tiles())
    assert fleet_delta(fleet_shown(fleet_tiles()), after) == {"tiles": {}, "chips": {}, "layout": False}


def test_an_engine_nobody_polls_is_stale_and_one_meant_to_be_down_is_stopped():
    seed = seed_fleet(3, problems=False)
    old = timezone.now() - timedelta(minutes=5)
    Engine.objects.filter(name="box-01-llama").update(last_poll_at=old)
    Engine.objects.filter(name="box-02-llama").update(status="down", expected_up=False)
    # An unreachable box's engine the leader still reads up stays up: only what nobody can read is unknown.
    Host.objects.filter(name="box-03").update(last_report_at=old)
    words = {c.name: (c.state, c.word) for t in fleet_tiles() for c in t.chips}
    assert words["box-01-llama"] == ("stale", "stale") and words["box-01-vllm-a"] == ("up", "up")
    assert words["box-02-llama"] == ("off", "stopped")
    assert words["box-03-vllm-a"] == ("up", "up")
    tiles = {t.name: t for t in fleet_tiles()}
    assert [t.name for t in fleet_tiles()] == ["box-03", "box-01", "box-02"]
    assert tiles["box-01"].rank == 2 and tiles["box-02"].rank == 9 and seed["hosts"]
