"""The claims view ("what do we believe now?") and the operators' import page, whose dry run
is shown before anything is written (issue 14, item 6 and "done when")."""

import re

from django.core.files.uploadedfile import SimpleUploadedFile

from dashboard.models import Engine, KVPoolEntry
from sparkops.changelog.importer import apply_import, plan_import
from sparkops.changelog.models import Entry

from .conftest import at
from .test_liberal_reading import FENCED

LOG = """## 2026-08-20 09:00 · Raise the window
Engines: nemotron, q38
Kind: claim
Claim: raising --max-model-len allocates nothing
Prediction: concurrency 10.6 at 262144 on nemotron
Claim: q38 keeps 3.6 concurrent agents
Prediction: concurrency 3.6 at 262144 on q38
Claim: the window is free on both
Evidence: https://example.test/bench

> Correction 2026-08-20 14:00 (claim 1, superseded): the pool shrank 2.7 %.
> Correction 2026-08-21 (claim 3, withdrawn): it is not free.

## 2026-08-22 · Split the memory
Engines: q38
Claim: 0.40 each is enough
Claim: nothing else runs on the box

> Correction 2026-08-23 (claim 1): 0.45 for the driver, 0.35 for q38.
"""


def _states(page):
    """{claim text: state} of the claims table's rows."""
    return {text: state for state, text in re.findall(r'data-state="(\w+)">.*?<a href="[^"]+">([^<]+)</a>', page, re.S)}


def test_claims_view_states_engines_and_measurement(pair, viewer_client):
    apply_import(plan_import(LOG))
    KVPoolEntry.objects.create(
        recorded_at=at("2026-08-20 09:05"),
        engine=pair["nemotron"],
        window=262144,
        concurrency=10.31,
        pool_tokens=2_703_604,
    )
    page = viewer_client.get("/changelog/claims/").content.decode()
    states = _states(page)
    assert states == {
        "raising --max-model-len allocates nothing": "superseded",
        "q38 keeps 3.6 concurrent agents": "standing",
        "the window is free on both": "withdrawn",
        "0.40 each is enough": "corrected",
        "nothing else runs on the box": "standing",
    }
    assert "measured 10.3" in page and "2.7 % off" in page and "not measured yet" in page
    assert "https://example.test/bench" in page
    # One click: what is believed about nemotron now (standing or corrected, its own or its entry's).
    assert "?engine=nemotron&amp;state=believed" in page
    believed = _states(viewer_client.get("/changelog/claims/?engine=nemotron&state=believed").content.decode())
    assert believed == {}  # nemotron's one claim was superseded; claim 3 was withdrawn
    believed = _states(viewer_client.get("/changelog/claims/?engine=q38&state=believed").content.decode())
    assert believed == {
        "q38 keeps 3.6 concurrent agents": "standing",
        "0.40 each is enough": "corrected",
        "nothing else runs on the box": "standing",
    }
    withdrawn = _states(viewer_client.get("/changelog/claims/?state=withdrawn").content.decode())
    assert withdrawn == {"the window is free on both": "withdrawn"}
    assert viewer_client.get("/changelog/claims/?state=vibes").status_code == 200  # refused filter, no crash


def test_import_page_previews_then_imports_only_what_was_previewed(operator_client, pair):
    upload = SimpleUploadedFile("log.md", (LOG + "\n" + FENCED).encode())
    preview = operator_client.post("/changelog/import/", {"file": upload, "action": "preview"})
    page = preview.content.decode()
    assert preview.status_code == 200 and 'id="dry-run"' in page and "Would create 3 new entries" in page
    assert "note, line" in page and not Entry.objects.exists()  # shown, nothing written
    digest = re.search(r'name="previewed" value="(\w+)"', page)[1]
    text = (LOG + "\n" + FENCED).replace("\n", "\r\n")  # as the browser sends the textarea back
    tampered = operator_client.post(
        "/changelog/import/",
        {"text": text + "\r\n## 2026-09-01 · sneaked in\r\n", "previewed": digest, "action": "import"},
    )
    assert tampered.status_code == 200 and 'id="dry-run"' in tampered.content.decode() and not Entry.objects.exists()
    done = operator_client.post(
        "/changelog/import/", {"text": text, "previewed": digest, "action": "import"}, follow=True
    )
    assert "Imported: 3 new entries" in done.content.decode() and Entry.objects.count() == 3


def test_import_page_refuses_a_bad_log_with_its_line_and_viewers_cannot_import(operator_client, pair, client, viewer):
    bad = operator_client.post("/changelog/import/", {"text": "## 2026-02-30 · no such day\n", "action": "preview"})
    assert bad.status_code == 400 and "line 1: a date reads" in bad.content.decode() and not Entry.objects.exists()
    client.force_login(viewer)
    assert client.post("/changelog/import/", {"text": LOG, "action": "preview"}).status_code in (302, 403)
    assert not Entry.objects.exists() and Engine.objects.count() == 2
