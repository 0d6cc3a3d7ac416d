"""KV-pool and incident ledgers: pages, the add-row form, closing an incident, exports, chart data."""

import csv
import io

from dashboard.models import Incident, KVPoolEntry
from dashboard.models.ledgers import GIB
from sparkops.changelog.ledgers import pool_chart_data
from sparkops.changelog.services import entry_create

from .conftest import at

# Rows of the field report's KV-pool ledger (2026-08-19 systemd, 2026-08-20 window raised).
ROWS = [
    ("2026-08-19 12:00", "nemotron", 0.25, 9.12, 2_777_998, 131072, 21.2, "systemd, after retirements"),
    ("2026-08-19 12:00", "q38", 0.45, 30.33, 953_661, 131072, 7.28, "systemd, after retirements"),
    ("2026-08-20 14:00", "nemotron", 0.25, 8.26, 2_703_604, 262144, 10.31, "window raised; pool −2.7%"),
]


def _rows(pair):
    for when, name, share, gib, pool, window, conc, note in ROWS:
        KVPoolEntry.objects.create(
            recorded_at=at(when),
            engine=pair[name],
            memory_share=share,
            kv_memory_bytes=round(gib * GIB),
            pool_tokens=pool,
            window=window,
            concurrency=conc,
            note=note,
        )


def test_operator_adds_a_row_with_computed_concurrency(operator_client, pair):
    response = operator_client.post(
        "/changelog/ledgers/kvpool/add/",
        {
            "recorded_at": "2026-08-20T14:00",
            "engine": pair["q38"].pk,
            "memory_share": "0.45",
            "kv_memory_gib": "26.8",
            "pool_tokens": "858483",
            "window": "262144",
            "concurrency": "",
            "note": "window raised; pool −10.0%",
        },
    )
    assert response.status_code == 302
    row = KVPoolEntry.objects.get()
    assert row.concurrency == 3.27 and row.source == "manual" and row.created_by.username == "otto"
    assert round(row.tokens_per_gib) == 32033  # 858,483 / 26.8
    page = operator_client.get("/changelog/ledgers/").content.decode()
    assert "858,483" in page and "3.27×" in page and "32,033" in page and "26.80 GiB" in page


def test_bad_row_is_explained_and_not_saved(operator_client, pair):
    response = operator_client.post(
        "/changelog/ledgers/kvpool/add/",
        {
            "recorded_at": "2026-08-20T14:00",
            "engine": pair["q38"].pk,
            "memory_share": "45",
            "pool_tokens": "-5",
            "window": "262144",
        },
    )
    page = response.content.decode()
    assert response.status_code == 400 and "between 0 and 1" in page and "Must be a positive number" in page
    assert KVPoolEntry.objects.count() == 0


def test_pool_chart_has_one_trace_per_engine(viewer_client, pair):
    _rows(pair)
    traces = {t["name"]: t for t in pool_chart_data()}
    assert traces["nemotron"]["y"] == [2_777_998, 2_703_604] and traces["q38"]["y"] == [953_661]
    assert traces["nemotron"]["x"][1] == "2026-08-20T14:00:00+00:00"
    page = viewer_client.get("/changelog/ledgers/").content.decode()
    assert 'id="pool-chart-data"' in page and "/static/vendor/plotly-basic-" in page


def test_ledger_exports(viewer_client, pair):
    _rows(pair)
    md = viewer_client.get("/changelog/ledgers/kvpool.md").content.decode()
    assert "| 2026-08-20 14:00 | nemotron | 0.25 | 8.26 | 2,703,604 | 262,144 | 10.31× | 327,313 |" in md
    rows = list(csv.reader(io.StringIO(viewer_client.get("/changelog/ledgers/kvpool.csv").content.decode())))
    assert rows[0][:3] == ["date", "engine", "memory share"] and len(rows) == 4
    assert rows[1][1] == "nemotron" and rows[1][7] == "304,605"  # 2,777,998 / 9.12 GiB
    assert viewer_client.get("/changelog/ledgers/kvpool.pdf").status_code == 404


def test_operator_closes_an_incident_with_the_fix_and_the_entries(operator_client, pair):
    incident = Incident.objects.create(
        opened_at=at("2026-08-23 16:56"),
        engine=pair["nemotron"],
        unit="vllm-nemotron.service",
        trigger="CUDA error: an illegal instruction was encountered; exited 0, not restarted",
    )
    fix = entry_create(
        effective_at=at("2026-08-24 09:00"),
        kind="incident_note",
        title="Restart=always for vllm-nemotron",
        engines=[pair["nemotron"]],
    )
    bad = operator_client.post(
        f"/changelog/ledgers/incidents/{incident.pk}/close/", {"closed_at": "2026-08-22T00:00", "fix_that_held": ""}
    )
    assert "cannot close before it opened" in bad.content.decode() and "This field is required" in bad.content.decode()
    incident.refresh_from_db()
    assert incident.closed_at is None
    ok = operator_client.post(
        f"/changelog/ledgers/incidents/{incident.pk}/close/",
        {"closed_at": "2026-08-24T06:56", "fix_that_held": "Restart=always drop-in, 2026-08-24", "entries": [fix.pk]},
    )
    assert ok.status_code == 302
    incident.refresh_from_db()
    assert incident.fix_that_held == "Restart=always drop-in, 2026-08-24" and incident.closed_by.username == "otto"
    assert list(incident.changelog_entries.all()) == [fix]
    md = operator_client.get("/changelog/ledgers/incidents.md").content.decode()
    assert "| 2026-08-23 16:56 | vllm-nemotron.service | CUDA error" in md
    assert f"Restart=always drop-in, 2026-08-24 | 2026-08-24 06:56 | #{fix.pk} Restart=always for vllm-nemotron |" in md
