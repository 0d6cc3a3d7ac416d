"""Timeline, forms (clear messages, nothing saved on error), roles, exports, live events."""

import pytest

from sparkops.changelog.models import Claim, Correction, Entry
from sparkops.changelog.services import correction_create, entry_create

from .conftest import at

WRITE_URLS = ["/changelog/new/", "/changelog/{pk}/edit/", "/changelog/{pk}/correct/", "/changelog/ledgers/kvpool/add/"]


def _form(**over):
    data = {
        "effective_at": "2026-08-20T09:00",
        "kind": "flag_change",
        "title": "Raise the window",
        "flags": "--max-model-len: 131072 → 262144",
        "body_md": "why",
        "units": "vllm-nemotron.service",
        "reason": "agents need 256K",
        "expected_effect": "nothing allocated",
        "evidence": "",
        "claims-TOTAL_FORMS": "2",
        "claims-INITIAL_FORMS": "0",
        "claims-0-text": "allocates nothing",
        "claims-0-metric": "concurrency",
        "claims-0-predicted": "10.6",
        "claims-0-window": "262144",
        "claims-1-text": "",
    }
    data.update(over)
    return data


def test_viewers_read_but_every_write_is_403(viewer_client, pair):
    entry = entry_create(effective_at=at("2026-08-20 09:00"), kind="decision", title="t")
    assert viewer_client.get("/changelog/").status_code == 200
    assert viewer_client.get(entry.get_absolute_url()).status_code == 200
    assert viewer_client.get("/changelog/ledgers/").status_code == 200
    for url in WRITE_URLS:
        assert viewer_client.post(url.format(pk=entry.pk), {}).status_code == 403, url
    assert "Write a correction" not in viewer_client.get(entry.get_absolute_url()).content.decode()


def test_new_entry_through_the_form(operator_client, pair):
    data = _form(engines=[pair["nemotron"].pk, pair["q38"].pk], evidence="https://example.test/log\nrun:12")
    response = operator_client.post("/changelog/new/", data)
    entry = Entry.objects.get()
    assert response.status_code == 302 and response["Location"] == entry.get_absolute_url()
    assert entry.author_name == "otto" and entry.reason == "agents need 256K"
    assert [str(f) for f in entry.flags.all()] == ["--max-model-len: 131072 → 262144"]
    claim = entry.claims.get()
    assert (claim.text, claim.metric, claim.predicted, claim.window) == (
        "allocates nothing",
        "concurrency",
        10.6,
        262144,
    )
    assert [(e.kind, e.url, e.ref_id) for e in entry.evidence.all()] == [
        ("url", "https://example.test/log", None),
        ("benchmark_run", "", 12),
    ]


@pytest.mark.parametrize(
    "over,field,message",
    [
        ({"title": ""}, "title", "This field is required"),
        ({"flags": "--max-model-len 131072 262144"}, "flags", "a flag change reads"),
        ({"flags": ""}, "flags", "names at least one flag change"),
        ({"effective_at": "yesterday"}, "effective_at", "Enter a valid date/time"),
        ({"evidence": "ftp://nope"}, "evidence", "evidence is a URL"),
        ({"body_md": "ok\n## sneaky heading"}, "body_md", "begins a new entry"),
        ({"claims-0-predicted": ""}, None, "needs both a metric and a predicted value"),
        ({"claims-0-text": ""}, None, "A prediction belongs to a claim"),
    ],
)
def test_bad_entry_input_is_explained_and_nothing_is_saved(operator_client, pair, over, field, message):
    response = operator_client.post("/changelog/new/", _form(**over))
    page = response.content.decode()
    assert response.status_code == 200 and message in page.replace("&#x27;", "'")
    assert "Nothing was saved" in page
    assert Entry.objects.count() == 0 and Claim.objects.count() == 0


@pytest.mark.parametrize("count", ["21", "2147483648"])
def test_a_claim_count_past_twenty_is_refused_with_twenty_rows_and_nothing_saved(operator_client, pair, count):
    response = operator_client.post("/changelog/new/", _form(**{"claims-TOTAL_FORMS": count}))
    page = response.content.decode()
    assert response.status_code == 200 and not Entry.objects.exists()
    assert "Please submit at most 20 forms." in page
    assert page.count('class="claimrow"') == 20  # what it read, not the thousand it was told


def test_twenty_claims_are_taken(operator_client, pair):
    rows = {f"claims-{i}-text": f"claim {i}" for i in range(20)}
    response = operator_client.post("/changelog/new/", _form(**{"claims-TOTAL_FORMS": "20", **rows}))
    assert response.status_code == 302
    assert Entry.objects.get().claims.count() == 20


def test_correction_errors_save_nothing(operator_client, pair):
    entry = entry_create(effective_at=at("2026-08-20 09:00"), kind="decision", title="t", claims=[{"text": "c"}])
    bad = operator_client.post(
        f"/changelog/{entry.pk}/correct/",
        {"corrected_at": "2026-08-21T10:00", "target": "entry", "mark": "withdrawn", "text_md": "wrong"},
    )
    assert bad.status_code == 400 and "applies to one claim" in bad.content.decode()
    empty = operator_client.post(
        f"/changelog/{entry.pk}/correct/", {"corrected_at": "2026-08-21T10:00", "target": "entry", "text_md": "   "}
    )
    assert empty.status_code == 400 and Correction.objects.count() == 0


def test_entry_level_correction_sits_beside_the_original(operator_client, pair):
    entry = entry_create(
        effective_at=at("2026-05-27 10:00"),
        kind="claim",
        title="Quality cliff at 57K",
        body_md="The audit fleet dies at ~57K: the quantization's 4K calibration.",
    )
    operator_client.post(
        f"/changelog/{entry.pk}/correct/",
        {
            "corrected_at": "2026-08-19T12:00",
            "target": "entry",
            "text_md": "It was an HTTP 400: prompt + max_tokens exceeded the 65,536 window.",
        },
    )
    page = operator_client.get(entry.get_absolute_url()).content.decode()
    original = page[page.index('id="entry-original"') : page.index('id="entry-corrections"')]
    beside = page[page.index('id="entry-corrections"') :]
    assert "corrected on 2026-08-19 12:00" in original and "4K calibration" in original
    assert "HTTP 400" in beside and "Correction 2026-08-19 12:00" in beside


def test_timeline_filters(viewer_client, pair):
    a = entry_create(
        effective_at=at("2026-06-07 15:10"),
        kind="incident_note",
        title="Compile storm",
        engines=[pair["q38"]],
        body_md="~21 cicc at 3.3 GiB each",
    )
    b = entry_create(
        effective_at=at("2026-08-20 09:00"), kind="claim", title="Window raise", engines=[pair["nemotron"]]
    )
    correction_create(entry=b, text_md="cost 2.7 %")

    def titles(query):
        page = viewer_client.get("/changelog/" + query).content.decode()
        return [t for t in ("Compile storm", "Window raise") if f">{t}</a>" in page]

    assert titles("") == ["Compile storm", "Window raise"]
    assert titles("?engine=nemotron") == ["Window raise"]
    assert titles("?kind=incident_note") == ["Compile storm"]
    assert titles("?start=2026-08-01&end=2026-08-31") == ["Window raise"]
    assert titles("?end=2026-06-07") == ["Compile storm"]
    assert titles("?corrected=yes") == ["Window raise"] and titles("?corrected=no") == ["Compile storm"]
    assert titles("?q=cicc") == ["Compile storm"] and titles("?q=2.7") == ["Window raise"]
    bad = viewer_client.get("/changelog/?start=2026-08-31&end=2026-08-01").content.decode()
    assert "The range ends before it starts." in bad
    assert a.pk != b.pk


def test_export_download(viewer_client, pair):
    entry_create(effective_at=at("2026-08-20 09:00"), kind="decision", title="t", engines=[pair["q38"]])
    md = viewer_client.get("/changelog/export/?format=md")
    assert (
        md["Content-Type"].startswith("text/markdown")
        and "## 2026-08-20 09:00 · t\nEngines: q38\nKind: decision\n" in md.content.decode()
    )
    js = viewer_client.get("/changelog/export/?format=json").json()
    assert js[0]["title"] == "t" and js[0]["engines"] == ["q38"]
