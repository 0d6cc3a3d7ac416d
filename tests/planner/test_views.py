"""The planner page and its writes through Django's test client: the JSON the script computes
from, the CSP (no inline script), the links to it, the setting form, and "Record as a claim"."""

import json
import re

from dashboard.models import KVPoolEntry
from sparkops.changelog.export import export_markdown
from sparkops.changelog.models import Entry
from sparkops.changelog.selectors import claim_measurement
from sparkops.planner.models import BoxSetting

from .appendix import APPENDIX, THROUGH_0819, add_args
from .conftest import cli, feed, plan_json


def _data(html):
    m = re.search(r'<script id="planner-data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


def test_page_embeds_the_models_and_loads_its_script(spark, viewer_client):
    feed(THROUGH_0819)
    r = viewer_client.get(f"/planner/{spark.name}/")
    html = r.content.decode()
    assert r.status_code == 200
    data = _data(html)
    # qwen3-next-80b is known from the ledger only (a retired record): not planned for (issue 31)
    assert [e["engine"] for e in data["engines"]] == ["nemotron", "q38"]
    nemotron = data["engines"][0]
    assert nemotron["current_window"] == 131072 and nemotron["current_util"] == 0.25
    assert len(nemotron["windows"]["131072"]["line_rows"]) == 3 and nemotron["raise"]["tokens_per_doubling"] is None
    assert '<script src="/static/js/planner.js" defer></script>' in html
    scripts = re.findall(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>", html)
    assert scripts == []  # the CSP allows no inline script
    assert "script-src 'self'" in r.headers["Content-Security-Policy"]
    assert "Record as a claim" not in html  # a viewer reads, an operator records
    assert viewer_client.get("/planner/").status_code == 302  # one box: straight to it


def test_host_and_ledgers_pages_link_the_planner(spark, viewer_client):
    assert f'href="/planner/{spark.name}/"' in viewer_client.get(f"/hosts/{spark.name}/").content.decode()
    assert 'href="/planner/"' in viewer_client.get("/changelog/ledgers/").content.decode()


def _as(user):
    from django.test import Client

    c = Client()
    c.force_login(user)
    return c


def test_setting_form_saves_and_refuses(spark, operator, viewer):
    operator_client, viewer_client = _as(operator), _as(viewer)
    r = operator_client.post(f"/planner/{spark.name}/setting/", {"headroom_gib": "20", "memory_gib": "121"})
    assert r.status_code == 302 and BoxSetting.objects.get(host=spark).headroom_gib == 20
    operator_client.post(f"/planner/{spark.name}/setting/", {"headroom_gib": "-3", "memory_gib": ""})
    assert BoxSetting.objects.get(host=spark).headroom_gib == 20  # refused, unchanged
    assert viewer_client.post(f"/planner/{spark.name}/setting/", {"headroom_gib": "1"}).status_code == 403
    html = operator_client.get(f"/planner/{spark.name}/").content.decode()
    assert "Memory <b>121.0 GiB</b>" in html and "planner setting" in html


def test_record_as_a_claim_writes_claim_and_prediction_lines_that_the_next_row_answers(spark, operator_client):
    feed(THROUGH_0819)
    expected = plan_json("--engine", "nemotron", "--util", "0.25", "--window", "262144")
    r = operator_client.post(
        f"/planner/{spark.name}/claim/", {"engine": "nemotron", "util": "0.25", "window": "262144", "predicted": "99"}
    )
    entry = Entry.objects.get()
    assert r.status_code == 302 and r["Location"] == entry.get_absolute_url()
    assert entry.kind == "claim" and [e.name for e in entry.engines.all()] == ["nemotron"]
    conc = entry.claims.get(metric="concurrency")
    assert conc.predicted == expected["concurrency"] == 10.6 and conc.window == 262144  # the server's, not "99"
    md = export_markdown()
    assert "Claim: At util 0.25 and window 262,144, nemotron serves 10.6× full-length requests" in md
    assert "Prediction: concurrency 10.6 at 262144 on nemotron" in md
    assert "Prediction: pool_tokens 2777998 at 262144 on nemotron" in md
    assert "no earlier raise of this engine is in the ledger" in md
    for row in expected["basis"]:
        assert f"/changelog/ledgers/#kv-{row['id']}" in entry.body_md  # the rows it rests on

    # the restart: the 2026-08-20 row, after the entry took effect, is compared with the claim
    _date, *rest = APPENDIX[9]
    cli("ledger", *add_args((entry.effective_at.strftime("%Y-%m-%dT%H:%M"), *rest)))
    KVPoolEntry.objects.filter(window=262144, engine__name="nemotron").update(recorded_at=entry.effective_at)
    got = claim_measurement(claim=conc)
    assert got["measured"] == 10.31 and round(got["off_pct"], 1) == 2.7 and got["differs"]
    page = operator_client.get(entry.get_absolute_url()).content.decode()
    assert "10.31×" in page


def test_record_refuses_bad_input_and_writes_nothing(spark, operator, viewer):
    operator_client, viewer_client = _as(operator), _as(viewer)
    feed(THROUGH_0819)
    for body in (
        {"engine": "nemotron", "util": "1.7", "window": "262144"},
        {"engine": "nemotron", "util": "0.25", "window": "0"},
        {"engine": "ghost", "util": "0.25", "window": "262144"},
        {"engine": "nemotron", "util": "0.05", "window": "131072"},  # the line leaves no KV memory
    ):
        r = operator_client.post(f"/planner/{spark.name}/claim/", body, follow=True)
        assert "Nothing was recorded" in r.content.decode()
    assert Entry.objects.count() == 0
    r = viewer_client.post(f"/planner/{spark.name}/claim/", {"engine": "nemotron", "util": "0.25", "window": "262144"})
    assert r.status_code == 403 and Entry.objects.count() == 0
